"""Synchronous mode on Ray plays and trains exactly what the in-process reference loop does.

What is exact, and why: every seed of a training trajectory (env seed, per-trajectory sampling seed, the
injected latency and failures) is a pure function of the config seed and the group index, and the engine
draws each request's uniforms from that request's own generator, so the token ids, rewards and versions of
every batch are identical; with ``async.redundancy: 2`` too, since under ``redundancy_keep: by_index`` the
kept rollouts depend only on which fail (here: seeded injected failures), not on which finish first. What
is not: the behaviour log-probs the engine records depend in the last bits on which requests it batched
together (Ray timing here, the event loop there); they enter the importance ratio, so the trained weights
agree to float rounding, not bitwise.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from rollarc.envs.latency import LatencyConfig
from rollarc.runtime.entry import run_training
from rollarc.train.reference_loop import run_reference
from tests.integration.test_runtime import config, metrics, only_run

pytestmark = pytest.mark.slow

EXACT = ["batch_digest", "reward", "success", "generated_tokens", "prompt_tokens", "turns", "trajectories"]


@pytest.mark.parametrize("redundancy", [0, 2])
def test_sync_runtime_trains_the_reference_loops_batches(nano_policy_dir, tmp_path, redundancy):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        env_kwargs={"raise_on_seed_mod": 4},  # group 0 (env seed 0) fails whole: its replacement must match too
        train={"steps": 3, "eval_episodes": 0, "checkpoint_every": 0},
    )
    # injected step failures too: which trajectories fail must not depend on Ray timing (regression)
    latency = LatencyConfig(kind="fixed", fixed_s=0.0, failure_prob=0.15)
    cfg = cfg.model_copy(
        update={
            "tasks": [cfg.tasks[0].model_copy(update={"latency": latency})],
            # the failures are the point here: the run must not stop for them (async.max_failed_fraction)
            # redundancy 2 (by_index): group 3 loses rollout 1 and spare 2, and keeps 0 and 3, in both (not timing)
            "async_": cfg.async_.model_copy(update={"max_failed_fraction": 1.0, "redundancy": redundancy}),
        }
    )
    assert run_training(cfg) == 0
    run = only_run(tmp_path)
    rows = metrics(run)
    reference = run_reference(cfg)
    assert len(rows) == len(reference.steps) == 3
    for row, ref in zip(rows, reference.steps, strict=True):
        assert [row[k] for k in EXACT] == [ref[k] for k in EXACT], f"step {row['step']}"
        assert row["token_staleness_max"] == ref["token_staleness_max"] == 0.0
        assert row["loss"] == pytest.approx(ref["loss"], abs=1e-5)
    assert len({r["batch_digest"] for r in rows}) == 3  # three different batches, not one repeated
    assert rows[-1]["dropped_failed_groups"] >= 2  # failed groups were replaced, by the same indices in both
    if redundancy:  # the spares did replace failed rollouts: without them the batches differ
        without = run_reference(cfg.model_copy(update={"async_": cfg.async_.model_copy(update={"redundancy": 0})}))
        assert [r["batch_digest"] for r in without.steps] != [r["batch_digest"] for r in rows]
    trained = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "step_000003" / "policy").state_dict()
    assert reference.model is not None
    ours = reference.model.state_dict()
    start = AutoModelForCausalLM.from_pretrained(nano_policy_dir).state_dict()
    # Weights agree to float rounding of the behaviour log-probs (see the module docstring); a different batch
    # or a missed step would move coordinates by whole Adam steps (about lr = 1e-3), 10x the tolerance.
    worst = max(float((trained[k] - ours[k]).abs().max()) for k in trained)
    assert worst < 1e-4, worst
    assert max(float((trained[k] - start[k]).abs().max()) for k in trained) > 5e-4  # training did move them
    exact = all(torch.equal(trained[k], ours[k]) for k in trained)
    print(f"final weights: max |runtime - reference| = {worst:.3g} (bitwise equal: {exact})")
