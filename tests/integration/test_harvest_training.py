"""`rollarc train` with a borrowed co-serving replica on a local Ray cluster (harvest:, docs/rose.md).

One run: serving requests withdraw the replica (its in-flight turns are aborted and retried on the dedicated
replica), and the replica is killed mid-run (``ray.kill``): every event is counted and the run finishes.
Preemption depends on timing in a run (its counter is reported), so a second test forces it, and a migration,
on the replica directly; it also checks the borrowed site's weights bitwise after a delta sync, the hop
accounting (one delta into the site, fanned out inside it), and a replacement's full copy.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest
import ray
import torch

from rollarc.agent.chat import ChatRenderer, Message
from rollarc.engine.types import SamplingParams
from rollarc.models import load_tokenizer
from rollarc.rose.trace import TraceRequest, write_trace
from rollarc.runtime.entry import run_training
from rollarc.runtime.harvest_pool import HarvestPool
from rollarc.runtime.ray_cluster import start_ray, stop_ray
from rollarc.runtime.workers import Workers
from rollarc.sync.versions import WeightReceiver
from tests.integration.kill_during_run import train_killing
from tests.integration.test_runtime import config, metrics, only_run
from tests.integration.test_weight_sync_and_failover import scripted_group

pytestmark = pytest.mark.slow

# Serving traffic of 2 requests/s, 20/s for 1 s in every 2.5 s (bursts); a TPOT target no step meets while serving
# decodes, so the guard reports no headroom while serving runs, and the replica is lent at once in serving's idle
# gaps and withdrawn at once when a request comes (no hysteresis: many lends and withdrawals in a short run); a KV budget that
# holds the longest turn (the tasks' context_limit, 200) but that one serving request (up to 64 + 16 tokens reserved)
# overflows next to running borrowed turns, so arrivals preempt.
HARVEST: dict[str, Any] = {
    "serving": {"preset": "nano", "seed": 99, "max_model_len": 256, "max_num_seqs": 32},
    "slo_source": "fixed",
    "slo": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 0.5},
    "memory_tokens": 200,
    "synthetic": {"rate_per_s": 2.0, "burst_every_s": 2.5, "burst_len_s": 1.0, "burst_factor": 10.0},
    "replay": {"token_scale": 0.25, "duration_s": 10.0, "max_prompt_tokens": 64, "max_output_tokens": 16},
    "lend_after_s": 0.0,
    "withdraw_after_s": 0.0,
    "drain_timeout_s": 0.0,
    "poll_s": 0.05,
}


def test_training_on_borrowed_capacity_counts_withdrawals_migrations_and_a_dead_replica(nano_policy_dir, tmp_path):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        harvest=HARVEST,
        train={"steps": 10, "groups_per_step": 4, "group_size": 4, "checkpoint_every": 0},
        env_kwargs={"turns": 3},
        sync={"method": "delta"},
    )
    assert train_killing(cfg, tmp_path, 7, "borrowed-0") == (0, ["borrowed-0"])
    run = only_run(tmp_path)
    rows = metrics(run)
    summary = json.loads((run / "summary.json").read_text())
    harvest = summary["harvest"]
    assert summary["steps"] == 10 and [r["step"] for r in rows] == list(range(1, 11))
    # the borrowed replica ran turns, and was lent and withdrawn as serving requests came and went
    turns = summary["routing"]["replica_turns"]
    assert sum(n for name, n in turns.items() if name.startswith("borrowed-")) > 0
    assert harvest["lends"] >= 1 and harvest["withdrawals"] >= 1
    # killed mid-run: counted and replaced (the replacement joins once its full copy has arrived)
    assert harvest["deaths"] == 1 and harvest["replacements"] == 1
    # one delta into the borrowed site while it had a member; the dedicated replica's fetch every step
    for row in rows[:6]:
        assert row["cross_site_bytes"] > 0 and "origin->borrowed-0" in row["sync_hops"]
        assert row["full_copy_bytes"] > 0  # fp32 deltas here (no sync.dtype): dense, about a full copy each
    assert all(row["sync_bytes"] > 0 and "origin->rollout-0" in row["sync_hops"] for row in rows)
    for key in ("preemptions", "pauses", "migrated_turns", "withdrawals", "lends", "deaths", "replacements"):
        assert f"harvest_{key}" in rows[-1] and key in harvest
    # migrated turns that carried partial output were resumed from it (their tokens counted), not regenerated
    assert 0 <= harvest["migrated_kept"] <= harvest["migrated"]
    assert harvest["migrated_kept_tokens"] >= harvest["migrated_kept"]
    assert rows[-1]["harvest_deaths"] == 1 and rows[-1]["harvest_withdrawals"] == harvest["withdrawals"]
    # the serving steps right after a borrowed rollout step, whose measured/predicted ratio the guard budgets
    after = {key: rows[-1][f"harvest_serving_after_rollout_{key}"] for key in ("steps", "us", "predicted_us")}
    assert (after["us"] > 0) == (after["steps"] > 0) and after["predicted_us"] >= 0
    # borrowed turns are on the timeline (role borrowed, one lane per replica), so the report's figures include them
    spans = [json.loads(line) for line in (run / "timeline.jsonl").read_text().splitlines()]
    borrowed = [sp for sp in spans if sp["role"] == "borrowed"]
    assert borrowed and all(sp["kind"] == "generate" and sp["worker"].startswith("borrowed-") for sp in borrowed)
    assert sum(sp["new_tokens"] for sp in borrowed) > 0
    print("harvest summary:", json.dumps({k: v for k, v in harvest.items() if k != "replicas"}))


def test_a_lost_trainer_recovers_with_harvest_and_the_borrowed_site_restarts_from_the_checkpoint(
    nano_policy_dir, tmp_path
):
    cfg = config(
        nano_policy_dir,
        tmp_path,
        harvest=HARVEST,
        train={"steps": 6, "groups_per_step": 2, "group_size": 4, "checkpoint_every": 2},
        env_kwargs={"turns": 2},
        sync={"method": "delta"},
    )
    assert train_killing(cfg, tmp_path, 3, "train-0") == (0, ["train-0"])
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["trainer_restarts"] == 1
    # the borrowed site was replaced once, from the checkpoint: its new replica (the next name) is the one left
    harvest = summary["harvest"]
    assert harvest["restarts"] == 1 and [r["name"] for r in harvest["replicas"]] == ["borrowed-1"]


def test_a_restarted_router_routes_to_the_replica_still_lent(nano_policy_dir, tmp_path):
    # a guard that admits rollout beside this light serving load, and a replica that is never withdrawn: after the
    # router's restart only its re-registration (HarvestPool.registrations) can bring borrowed turns back
    harvest = {**HARVEST, "slo": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 200.0}, "withdraw_after_s": 1e6}
    cfg = config(
        nano_policy_dir,
        tmp_path,
        harvest=harvest,
        train={"steps": 6, "groups_per_step": 2, "group_size": 4, "checkpoint_every": 0},
        env_kwargs={"turns": 2},
    )
    assert train_killing(cfg, tmp_path, 2, "router", restart=True) == (0, ["router"])
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["router_restarts"] == 1
    assert summary["harvest"]["withdrawals"] == 0 and summary["harvest"]["lent_at_end"] == ["borrowed-0"]
    assert [r["device"] for r in summary["harvest"]["replicas"]] == ["cpu"]  # S and the policy: model.device's
    # the restarted router's counts start at its restart: the borrowed replica ran turns after it
    assert summary["routing"]["replica_turns"].get("borrowed-0", 0) > 0


def test_borrowed_site_syncs_bitwise_preempts_migrates_and_replaces_a_dead_member(nano_policy_dir, tmp_path):
    # serving: a 64-token prompt, 16 output tokens, every 0.1 s; a KV budget that holds one long borrowed turn
    # alone (about 20 + 200 tokens) but not beside a serving request (80): every arrival preempts it
    trace = write_trace(tmp_path / "trace.csv", [TraceRequest(0.1 * i, 64, 16) for i in range(100)])
    harvest = {
        **HARVEST,
        "replicas": 2,
        "slo": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 200.0},
        "memory_tokens": 250,
        "trace_path": str(trace),
        "replay": {"token_scale": 1.0, "duration_s": 10.0, "max_prompt_tokens": 64, "max_output_tokens": 16},
    }
    cfg = config(nano_policy_dir, tmp_path, harvest=harvest, train={"lr": 0.05}, sync={"method": "delta"})
    start_ray(cfg.cluster)
    try:
        workers = Workers(cfg, str(nano_policy_dir))
        pool = HarvestPool(cfg, workers.router, workers.trainer, str(nano_policy_dir), 0)
        renderer = ChatRenderer(load_tokenizer(nano_policy_dir))
        prompt = renderer.prompt_ids([Message("user", "t0..")])
        group = scripted_group(prompt, renderer)
        for version in (1, 2):
            ray.get(workers.trainer.train_step.remote([group], version - 1))
            payload = ray.get(workers.trainer.publish.remote())
            assert payload.version == version and payload.method == "delta"
            refs = pool.sync(payload)  # one per shard
            ray.get(workers.sync_all(payload))
            for ref in refs:
                ray.wait([ref], timeout=120)
                pool.on_sync(ref)
        metrics_row = pool.step_metrics()
        trainer = ray.get(workers.trainer.gathered_weights.remote())
        for name in ("borrowed-0", "borrowed-1"):
            got = ray.get(pool.replicas[name].engine_weights.remote())
            assert set(got) == set(trainer)
            assert all(torch.equal(got[k], trainer[k]) for k in trainer), name
        # two versions: each crossed into the site once, half of it to each member, and each half went on to the other
        hops = metrics_row["sync_hops"]
        assert set(hops) == {
            "origin->borrowed-0",
            "origin->borrowed-1",
            "borrowed-0->borrowed-1",
            "borrowed-1->borrowed-0",
        }
        assert metrics_row["cross_site_bytes"] == hops["origin->borrowed-0"] + hops["origin->borrowed-1"]
        assert metrics_row["in_site_bytes"] == hops["borrowed-0->borrowed-1"] + hops["borrowed-1->borrowed-0"]
        assert metrics_row["in_site_bytes"] == metrics_row["cross_site_bytes"]  # each shard forwarded once
        assert metrics_row["sync_full_copies"] == 0

        # preemption: serving arrivals overflow the shared KV budget; the turn resumes and keeps its versions
        long_turn = SamplingParams(temperature=1.0, max_tokens=200, ignore_eos=True)
        done = ray.get(pool.replicas["borrowed-0"].generate.remote(prompt, long_turn, "traj-a"))
        assert done.finish_reason == "length" and len(done.token_ids) == 200 and set(done.token_versions) == {2}
        assert ray.get(pool.replicas["borrowed-0"].headroom.remote())["counters"]["preemptions"] >= 1
        # the turn is on the timeline as a RolloutWorker's would be: role borrowed, its tokens, the batch it joined
        (span,) = pool.drain_spans()
        assert {k: span[k] for k in ("worker", "role", "kind", "traj", "prompt_tokens", "new_tokens", "batch")} == {
            "worker": "borrowed-0",
            "role": "borrowed",
            "kind": "generate",
            "traj": "traj-a",
            "prompt_tokens": len(prompt),
            "new_tokens": 200,
            "batch": 0,
        }
        assert span["t1"] > span["t0"] and pool.drain_spans() == []

        # migration: lent to the router, withdrawn mid-turn; the turn comes back aborted with its partial output,
        # and resumes from it (as the agent loop does: prompt + partial, the rest of the budget, the draws skipped)
        # on the dedicated replica under the same version
        ray.get(workers.router.add_replica.remote("borrowed-1", pool.replicas["borrowed-1"], "borrowed", 4))
        turn = workers.router.generate.remote(prompt, long_turn, "traj-b")
        deadline = time.monotonic() + 60
        while ray.get(pool.replicas["borrowed-1"].headroom.remote())["turns"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        outcome = ray.get(workers.router.remove_replica.remote("borrowed-1", 0.0))
        aborted = ray.get(turn)
        assert outcome == {"drained": 0, "aborted": 1} and aborted.finish_reason == "abort"
        assert set(aborted.token_versions) <= {2}
        kept = len(aborted.token_ids)
        rest = replace(long_turn, max_tokens=200 - kept, skip_draws=kept)
        resumed = ray.get(workers.router.generate.remote(prompt + aborted.token_ids, rest, "traj-b"))
        assert resumed.finish_reason == "length" and kept + len(resumed.token_ids) == 200
        assert set(resumed.token_versions) == {2}
        replica_turns = ray.get(workers.router.routing_stats.remote())["replica_turns"]
        assert replica_turns == {"borrowed-1": 1, "rollout-0": 1}
        counters = ray.get(pool.replicas["borrowed-1"].headroom.remote())["counters"]
        assert counters["migrated"] == 1
        assert (counters["migrated_kept"], counters["migrated_kept_tokens"]) == (int(kept > 0), kept)
        # the migrated turn's span on borrowed-1 counts the tokens it generated there before it was withdrawn
        assert [(sp["worker"], sp["traj"], sp["new_tokens"]) for sp in pool.drain_spans()] == [
            ("borrowed-1", "traj-b", kept)
        ]

        # a member dies; its replacement starts from the old checkpoint and gets a full copy of version 2
        ray.kill(pool.replicas["borrowed-1"])
        while "borrowed-2" not in pool.replicas and time.monotonic() < deadline + 60:
            pool.tick()  # notices the death, starts the replacement; it joins once its full copy has arrived
            time.sleep(0.05)
        assert pool.counters["deaths"] == 1 and list(pool.replicas) == ["borrowed-0", "borrowed-2"]
        replaced = pool.step_metrics()
        assert replaced["sync_full_copies"] == 1 and replaced["sync_hops"]["origin->borrowed-2"] > 0
        got = ray.get(pool.replicas["borrowed-2"].engine_weights.remote())
        assert all(torch.equal(got[k], trainer[k]) for k in trainer)
    finally:
        stop_ray()


@pytest.mark.timeout(1200)  # two training runs
def test_a_sync_run_with_harvest_trains_the_batches_of_the_same_run_without_it(nano_policy_dir, tmp_path):
    """Which replica generates a turn does not change what it generates: the same seeds give token-identical batches.

    A guard that admits rollout beside the light serving load and a replica that is never withdrawn, so the
    replica is lent from the first poll on and can take turns in the steps after the first (whose turns start before
    the first poll): whether it does work does not depend on how busy the machine is. (With ``HARVEST``'s
    withdrawals it got turns only when a step started inside a gap in serving, none at all on a loaded CI machine;
    a migration is forced on the replica directly in test_borrowed_site_syncs_bitwise_...) Behaviour log-probs may
    differ in the last bits with the batch a turn shared a forward pass with, as between two runs without harvest
    (test_runtime); the losses agree to that.
    """
    sections: dict[str, Any] = {
        "train": {"steps": 3, "groups_per_step": 4, "group_size": 4, "checkpoint_every": 0, "eval_episodes": 0},
        "env_kwargs": {"turns": 3},
        "sync": {"method": "delta"},
    }
    lent_throughout = {**HARVEST, "slo": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 200.0}, "withdraw_after_s": 1e6}
    assert run_training(config(nano_policy_dir, tmp_path / "harvest", harvest=lent_throughout, **sections)) == 0
    assert run_training(config(nano_policy_dir, tmp_path / "dedicated", **sections)) == 0
    harvest, dedicated = metrics(only_run(tmp_path / "harvest")), metrics(only_run(tmp_path / "dedicated"))
    summary = json.loads((only_run(tmp_path / "harvest") / "summary.json").read_text())
    turns = summary["routing"]["replica_turns"]
    print("replica turns:", turns, "migrated:", summary["harvest"]["migrated_turns"])
    assert sum(n for name, n in turns.items() if name.startswith("borrowed-")) > 0  # the borrowed replica did work
    keys = ["batch_digest", "reward", "generated_tokens", "prompt_tokens", "turns", "trajectories"]
    assert [[r[k] for k in keys] for r in harvest] == [[r[k] for k in keys] for r in dedicated]
    assert len({r["batch_digest"] for r in harvest}) == 3  # three different batches, not one repeated
    for a, b in zip(harvest, dedicated, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)


def _published(trainer: Any) -> dict[str, torch.Tensor]:
    """The weights the trainer published last, as a full copy to a fresh receiver rebuilds them."""
    receiver = WeightReceiver()
    receiver.apply(ray.get(trainer.fetch_weights.remote(None)))
    return dict(receiver.state)


def test_each_update_crosses_once_in_shards_and_every_member_holds_the_published_weights_bitwise(
    nano_policy_dir, tmp_path
):
    """Three members, chains inside the site (fanout 1): after every update, each member's engine holds bitwise the
    trainer's published (bf16) weights: while lent, withdrawn and lent again, and after a shard's owner dies
    mid-sync (the members it did not reach catch up) and its replacement joins."""
    harvest = {
        **HARVEST,
        "replicas": 3,
        "fanout": 1,
        "slo": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 200.0},
        "synthetic": {"rate_per_s": 0.5, "burst_every_s": 0.0},
    }
    cfg = config(
        nano_policy_dir, tmp_path, harvest=harvest, train={"lr": 0.05}, sync={"method": "delta", "dtype": "bfloat16"}
    )
    start_ray(cfg.cluster)
    try:
        workers = Workers(cfg, str(nano_policy_dir))
        pool = HarvestPool(cfg, workers.router, workers.trainer, str(nano_policy_dir), 0)
        assert len(pool.layouts) == 3 and pool.full_copy_bytes > 0
        renderer = ChatRenderer(load_tokenizer(nano_policy_dir))
        prompt = renderer.prompt_ids([Message("user", "t0..")])
        group = scripted_group(prompt, renderer)

        def step(version: int) -> tuple[Any, dict[str, Any]]:
            ray.get(workers.trainer.train_step.remote([group], version - 1))
            payload = ray.get(workers.trainer.publish.remote())
            assert payload.version == version and set(payload.shards) == set(pool.layouts)
            refs = pool.sync(payload)
            ray.get(workers.sync_all(payload))
            for ref in refs:
                ray.wait([ref], timeout=120)
                pool.on_sync(ref)
            return payload, pool.step_metrics()

        def assert_bitwise(version: int) -> None:
            published = _published(workers.trainer)
            assert all(t.dtype == torch.bfloat16 for t in published.values())
            for name, handle in pool.replicas.items():
                got = ray.get(handle.engine_weights.remote())
                assert set(got) == set(published), name
                assert all(torch.equal(got[k], published[k].float()) for k in published), (name, version)
                assert ray.get(handle.headroom.remote())["version"] == version, name

        for version in (1, 2):
            payload, row = step(version)
            assert_bitwise(version)
            # one copy crossed, a third to each member; each third went on to the two others
            shard_bytes = [payload.shards[layout].nbytes for layout in pool.layouts]
            hops = row["sync_hops"]
            assert [hops[f"origin->borrowed-{i}"] for i in range(3)] == shard_bytes
            assert row["cross_site_bytes"] == sum(shard_bytes) < 1.5 * payload.nbytes < row["full_copy_bytes"]
            assert row["in_site_bytes"] == 2 * row["cross_site_bytes"]
            assert row["sync_full_copies"] == 0

        # lent, withdrawn (it keeps receiving updates), lent again: the same weights as everyone
        for version, capacity in ((3, 4), (4, 0), (5, 4)):
            pool._decide("borrowed-1", capacity)  # the lending policy's decision, acted on with the router
            assert pool.lent() == (["borrowed-1"] if capacity else [])
            step(version)
            assert_bitwise(version)
        assert (pool.counters["lends"], pool.counters["withdrawals"]) == (2, 1)
        step(6)
        assert_bitwise(6)
        params = SamplingParams(temperature=1.0, max_tokens=4, ignore_eos=True)
        done = ray.get(pool.replicas["borrowed-1"].generate.remote(prompt, params, "traj-c"))
        assert set(done.token_versions) == {6}

        # the owner of shard 0 dies before the next sync: the others missed shards and catch up from the trainer
        ray.kill(pool.replicas["borrowed-0"])
        payload, row = step(7)
        assert pool.counters["deaths"] == 1 and "borrowed-0" not in pool.replicas
        # shards 1 and 2 went to their owners; the shards that did not reach a member came from the trainer
        assert row["cross_site_bytes"] > sum(payload.shards[layout].nbytes for layout in pool.layouts)
        assert row["sync_full_copies"] <= 2  # a delta chain or a full copy (fewer bytes) for each survivor
        assert_bitwise(7)
        deadline = time.monotonic() + 120
        while "borrowed-3" not in pool.replicas:  # the replacement joins once its full copies have arrived
            assert time.monotonic() < deadline
            pool.tick()
            time.sleep(0.05)
        joined = pool.step_metrics()
        assert joined["sync_full_copies"] == 1 and joined["sync_hops"]["origin->borrowed-3"] > 0
        assert_bitwise(7)
        _, row = step(8)  # the shards' owners are now borrowed-1, borrowed-2, borrowed-3
        assert {f"origin->borrowed-{i}" for i in (1, 2, 3)} <= set(row["sync_hops"])
        assert list(pool.replicas) == ["borrowed-1", "borrowed-2", "borrowed-3"]
        assert_bitwise(8)
    finally:
        stop_ray()
