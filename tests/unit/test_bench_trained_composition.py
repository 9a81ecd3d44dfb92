"""``trained_success_mean`` and ``trained_vs_admitted_length_ratio`` of ``rollarc bench async``, on hand-made rows."""

from __future__ import annotations

import json

import pytest

from rollarc.bench.async_ import bench_run_dirs, composition_of_runs, trained_composition
from rollarc.bench.trained_composition import composition_by_mode, composition_from_rows

ROWS = [  # two steps of 8 trained trajectories; 12 admitted trajectories ended over them
    {"step": 1, "trajectories": 8, "success": 0.25, "generated_tokens": 160, "admitted_tokens": 30.0,
     "admitted_trajectories": 4},
    {"step": 2, "trajectories": 8, "success": 0.5, "generated_tokens": 320, "admitted_tokens": 15.0,
     "admitted_trajectories": 8},
]  # fmt: skip


def test_one_run_weights_every_step_by_its_trajectories():
    got = composition_from_rows(ROWS)
    # trained: success (0.25*8 + 0.5*8) / 16; tokens (160 + 320) / 16 = 30; admitted (30*4 + 15*8) / 12 = 20
    assert got["trained_trajectories"] == 16
    assert got["trained_success_mean"] == pytest.approx(0.375)
    assert got["trained_tokens"] == pytest.approx(30.0) and got["admitted_tokens"] == pytest.approx(20.0)
    assert got["trained_vs_admitted_length_ratio"] == pytest.approx(1.5) and got["admitted_source"] == "metrics"


def test_a_run_before_the_admitted_keys_falls_back_on_its_task_profiles():
    old = [{k: v for k, v in r.items() if not k.startswith("admitted_")} for r in ROWS]
    profiles = {
        "tasks": {  # lake: 10 trajectories, 40 turns of 5 tokens; swe: 2 trajectories, 4 turns of 40 tokens
            "lake": {"turns": {"n": 10, "mean": 4.0}, "new_tokens_per_turn": {"n": 40, "mean": 5.0}},
            "swe": {"turns": {"n": 2, "mean": 2.0}, "new_tokens_per_turn": {"n": 4, "mean": 40.0}},
        }
    }
    got = composition_from_rows(old, profiles)
    assert got["admitted_tokens"] == pytest.approx((40 * 5 + 4 * 40) / 12)  # 30
    assert got["trained_vs_admitted_length_ratio"] == pytest.approx(1.0) and got["admitted_source"] == "task_profiles"
    bare = composition_from_rows(old)
    assert bare["trained_vs_admitted_length_ratio"] is None and bare["trained_success_mean"] == pytest.approx(0.375)


def test_medians_over_seeds_per_mode():
    runs = [
        ("sync", {"trained_success_mean": 0.4, "trained_vs_admitted_length_ratio": 1.0}),
        ("sync", {"trained_success_mean": 0.2, "trained_vs_admitted_length_ratio": 0.9}),
        ("sync", {"trained_success_mean": 0.3, "trained_vs_admitted_length_ratio": 1.1}),
        ("async_k2", {"trained_success_mean": 0.1, "trained_vs_admitted_length_ratio": 0.5}),
        ("async_k2", {"trained_success_mean": 0.2, "trained_vs_admitted_length_ratio": None}),
    ]
    assert composition_by_mode(runs) == {
        "trained_success_mean": {"sync": 0.3, "async_k2": pytest.approx(0.15)},
        "trained_vs_admitted_length_ratio": {"sync": 1.0, "async_k2": 0.5},  # a run without the ratio is left out
    }


def test_run_directories_of_a_bench_async_runs_folder(tmp_path):
    # bench async --runs ROOT: ROOT/LABEL/NAME-TIME/, LABEL = mode (first seed) or MODE_sN (seed N)
    layout = {"sync": 0.5, "sync_s1": 0.25, "async_k1": 0.75, "async_k2_s2": 1.0, "monolithic": 0.0}
    for label, success in layout.items():
        run = tmp_path / label / f"{label}-20261201-192000"
        run.mkdir(parents=True)
        rows = [{**r, "success": success} for r in ROWS]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "summary.json").write_text("{}")
    (tmp_path / "async_k2" / "async_k2-20261201-200000").mkdir(parents=True)  # still running: no summary.json
    pairs = bench_run_dirs(tmp_path, modes=("sync", "async_k1", "async_k2"))
    assert [(mode, run.parent.name) for mode, run in pairs] == [
        ("async_k1", "async_k1"),
        ("async_k2", "async_k2_s2"),
        ("sync", "sync"),
        ("sync", "sync_s1"),
    ]
    assert trained_composition(pairs[0][1])["trained_success_mean"] == pytest.approx(0.75)
    assert composition_of_runs(pairs) == {
        "trained_success_mean": {"async_k1": 0.75, "async_k2": 1.0, "sync": pytest.approx(0.375)},
        "trained_vs_admitted_length_ratio": {"async_k1": 1.5, "async_k2": 1.5, "sync": 1.5},
    }
