"""The phase split of ``rollarc bench step`` against hand-computed means: the phases' differences explain the step's."""

from __future__ import annotations

import pytest

from rollarc.bench.step import render, seeds_split
from rollarc.bench.step_split import PHASES, inprocess_split, phase_split, sync_split


def inproc_step(prompts: float, generate: float, env: float, batch: float, train: float) -> dict[str, float]:
    total = prompts + generate + env + batch + train
    return {
        "prompts_s": prompts,
        "generate_s": generate,
        "env_s": env,
        "batch_s": batch,
        "train_s": train,
        "step_time_s": total,
    }


def link(admit: float, generate: float, back: float, to_train: float, train: float, publish: float, sync: float):
    total = admit + generate + back + to_train + train + publish + sync
    return {
        "admit_s": admit,
        "stagger_s": 0.0,
        "generate_s": generate,
        "return_s": back,
        "to_train_s": to_train,
        "train_s": train,
        "publish_s": publish,
        "sync_s": sync,
        "step_s": total,
    }


def test_inprocess_split_leaves_step_one_out_and_averages_the_rest():
    steps = [
        inproc_step(1.0, 1.0, 1.0, 1.0, 1.0),  # warm-up: left out
        inproc_step(0.002, 0.09, 0.002, 0.0, 0.12),
        inproc_step(0.004, 0.11, 0.004, 0.002, 0.14),
    ]
    split = inprocess_split(steps)
    assert split == pytest.approx(
        {
            "start_s": 0.003,
            "generate_s": 0.1,
            "score_s": 0.003,
            "to_train_s": 0.001,
            "train_s": 0.13,
            "publish_s": 0.0,
            "sync_s": 0.0,
            "other_s": 0.0,
            "step_s": 0.237,
        }
    )


def test_sync_split_maps_links_and_keeps_what_no_link_covers():
    links = [link(0.02, 0.06, 0.004, 0.008, 0.12, 0.005, 0.007), link(0.016, 0.06, 0.006, 0.008, 0.12, 0.005, 0.007)]
    links[1]["step_s"] += 0.01  # 10 ms that no link covers in the second step
    split = sync_split(links)
    assert split["start_s"] == pytest.approx(0.018) and split["score_s"] == pytest.approx(0.005)
    assert split["publish_s"] == pytest.approx(0.005) and split["sync_s"] == pytest.approx(0.007)
    assert split["other_s"] == pytest.approx(0.005)
    assert split["step_s"] == pytest.approx(0.228)


def test_differences_add_up_to_the_step_difference():
    inproc = inprocess_split([inproc_step(0, 0, 0, 0, 0), inproc_step(0.001, 0.093, 0.002, 0.0, 0.126)])
    sync = sync_split([link(0.018, 0.059, 0.004, 0.008, 0.12, 0.005, 0.007)])
    diff = phase_split(inproc, sync)["sync_minus_inprocess"]
    assert diff["generate_s"] == pytest.approx(-0.034)
    assert diff["start_s"] == pytest.approx(0.017)
    assert diff["sync_s"] == pytest.approx(0.007)
    assert sum(diff[p] for p in (*PHASES, "other_s")) == pytest.approx(diff["step_s"]) == pytest.approx(0.221 - 0.222)


def test_seeds_split_averages_seeds_and_gives_the_ratio_it_explains():
    def seed(inproc_train: float, sync_train: float) -> dict:
        inproc = inprocess_split([inproc_step(0, 0, 0, 0, 0), inproc_step(0.0, 0.1, 0.0, 0.0, inproc_train)])
        sync = sync_split([link(0.02, 0.06, 0.0, 0.01, sync_train, 0.0, 0.01)])
        return {"modes": {"inprocess": {"phase_split": inproc}, "sync": {"phase_split": sync}}}

    out = seeds_split([seed(0.1, 0.1), seed(0.2, 0.3)])
    assert out["inprocess"]["step_s"] == pytest.approx(0.25) and out["sync"]["step_s"] == pytest.approx(0.3)
    assert out["sync_minus_inprocess"]["train_s"] == pytest.approx(0.05)
    assert out["ratio_from_steps"] == pytest.approx(0.25 / 0.3)
    assert seeds_split([{"modes": {"inprocess": {"phase_split": {}}}}]) == {}  # sync not run: no split


def test_the_docs_block_names_each_phase_difference():
    mode = {"completions_per_s": 250.0, "wall_s": 5.0, "success": 0.6}
    stats = {"median": 0.94, "min": 0.94, "max": 0.94}
    result = {
        "per_seed": [{"seed": 0, "modes": {"inprocess": mode, "sync": {**mode, "completions_per_s": 235.0}}}],
        "ratio_sync_vs_inprocess_seeds": stats,
        "ratio_async_vs_inprocess_seeds": {"median": None},
        "seeds": 1,
        "steps": 20,
        "completions_per_step": 64,
        "threads": 1,
        "phase_s": {},
        "phase_split": {"sync_minus_inprocess": {"start_s": 0.0191, "generate_s": -0.0317}},
    }
    assert "start_s +0.0191, generate_s -0.0317." in render(result)
