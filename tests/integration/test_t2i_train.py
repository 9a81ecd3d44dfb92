"""``rollarc train`` on a ``kind: t2i`` config: two Flow-GRPO steps with exploration and the contrast planner, then resume.

The runs start a Ray cluster of their own, not the suite's shared one (tests/integration/shared_ray.py): this test
checks the local path that ``rollarc train configs/t2i_quickstart.yaml`` takes; a joined t2i run places its roles by
the cluster's own resources (tested in test_spot_joined_cluster.py)."""

import json

import pytest

from rollarc.cli import main
from rollarc.diffusion.model import load_policy
from rollarc.runtime.run_dir import latest_checkpoint, layout_problems


def tiny_overrides(tmp_path):
    return [
        f"pretrain.checkpoint={tmp_path / 'base'}",
        "pretrain.steps=2",
        "pretrain.batch_size=8",
        "model.width=16",
        "model.layers=1",
        "model.heads=2",
        "train.steps=2",
        "train.prompts_per_step=2",
        "train.group_size=2",
        "train.sample_steps=2",
        "train.eval_steps=3",
        "train.eval_every=1",
        "train.eval_prompts=2",
        "train.eval_seeds=1",
        "explore.enabled=true",
        "explore.planner=contrast",
        "explore.candidates=4",
        "explore.chunk=1",
        f"run.dir={tmp_path / 'runs'}",
        "run.checkpoint_every=1",
        "run.tensorboard=false",
    ]


@pytest.mark.slow
def test_t2i_train_explores_trains_reports_and_resumes(tmp_path):
    overrides = tiny_overrides(tmp_path)
    assert main(["train", "configs/t2i_quickstart.yaml", *overrides]) == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["sample_version"] for r in rows] == [0, 1]  # samples carry the version that drew them
    assert [r["explorer_staleness"] for r in rows] == [0, 1]  # the first step has no older version
    assert all("chosen_var_fresh" in r and "random_var_stale" in r and "low_contrast_fraction" in r for r in rows)
    # the planner's allocation is logged (a 2-step base scores every image 0: no gain, so a uniform split)
    assert [(r["explored_fraction"], r["candidates_std"]) for r in rows] == [(1.0, 0.0), (1.0, 0.0)]
    assert rows[-1]["explored_images"] > rows[-1]["sampled_images"] - 4  # explorer scored candidates
    # weights went through rollarc.sync: the trainer published its start weights, so each step is a delta
    assert [(r["sync_version"], r["sync_full_copies"]) for r in rows] == [(1, 0), (2, 0)]
    assert all(r["sync_bytes"] > 0 for r in rows)
    assert rows[-1]["sync_bytes_total"] == sum(r["sync_bytes"] for r in rows)
    for name in ("report.md", "learning_curve.png", "summary.json", "samples/heldout_step_00000.png"):
        assert (run_dir / name).is_file(), name
    assert layout_problems(run_dir) == []  # the LLM path's layout (test_runtime): config, fingerprint, summary keys
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    base, trained = load_policy(tmp_path / "base"), load_policy(latest_checkpoint(run_dir) / "policy")
    # (a 2-step base draws noise, every reward is 0, so RL leaves the DiT as is: test_t2i_model checks a step moves it)
    assert all(
        (a == b).all()
        for a, b in zip(base.encoder.state_dict().values(), trained.encoder.state_dict().values(), strict=True)
    )  # the prompt encoder is frozen in RL

    assert main(["train", "configs/t2i_quickstart.yaml", *overrides, "train.steps=3", f"resume={run_dir}"]) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["sample_version"] == 2
    # the resumed sampler loads the checkpoint the resumed trainer publishes from: a delta, not a full copy
    assert (rows[-1]["sync_version"], rows[-1]["sync_full_copies"]) == (3, 0)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["steps"], summary["resumes"], summary["status"]) == (3, 1, "completed")
    assert (run_dir / "config.resume-1.yaml").is_file() and layout_problems(run_dir) == []
    # run.keep_last_checkpoints (2): step 3's checkpoint retired step 1's (regression: t2i kept every checkpoint)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002", "step_000003"]
    (history,) = [json.loads(line) for line in (run_dir / "config_history.jsonl").read_text().splitlines()]
    assert history["changed"] == {"train.steps": {"from": 2, "to": 3}} and history["checkpoint"] == "step_000002"
