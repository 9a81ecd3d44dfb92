"""The README's asynchrony row names the baseline and what each side had, and shows the no-latency run."""

from __future__ import annotations

import json
from pathlib import Path

from rollarc.bench.async_target import time_to_target
from rollarc.bench.table import _async, readme_block, where

REPO = Path(__file__).resolve().parents[2]


def _setup(mode: str, k: int, threads: int, correction: str) -> dict:
    return {
        "async": mode,
        "max_staleness": k,
        "in_flight_update": "finish",
        "correction": correction,
        "threads": {"train": threads, "rollout": [threads]},
    }


def _result(k2_curve: list[tuple[float, float]], latency_off: bool = False) -> dict:
    curves = {
        "sync": [[(0.0, 0.4), (40.0, 0.5), (80.0, 0.7)]],
        "sync_full": [[(0.0, 0.4), (20.0, 0.5), (40.0, 0.7)]],
        "async_k1": [[(0.0, 0.4), (20.0, 0.5), (40.0, 0.7)]],
        "async_k2": [k2_curve],
    }
    runs = {m: [{"curve": c, "steps": [0, 2, 4][: len(c)]} for c in of] for m, of in curves.items()}
    return {
        **time_to_target(runs, 0.6, "--target, fixed before the runs"),
        "workload": {"config": "configs/longtail.yaml", "env_latency": not latency_off},
        "mode_setup": {
            "sync": _setup("sync", 0, 1, "tis"),
            "sync_full": _setup("sync", 0, 2, "none"),
            "async_k1": _setup("async", 1, 1, "tis"),
            "async_k2": _setup("async", 2, 1, "tis"),
        },
        "seeds": 1,
        "target_noise": 0.069,
        "target_outside_noise": True,
    }


def test_the_row_names_the_baseline_what_each_side_had_and_the_no_latency_result():
    d = _result([(0.0, 0.4), (10.0, 0.5), (20.0, 0.7)])
    # sync_full crosses at 30 s (between 20 and 40), k = 2 at 15 s: 2.00x; sync at 60 s is the weaker baseline
    text, command = _async(d)
    assert d["baseline_mode"] == "sync_full"
    assert "time to held-out success 0.600 (fixed before the runs), `configs/longtail.yaml` (env latency)" in text
    assert "k = 2 **2.00×**, k = 1 **1.00×** against `sync_full`, the fastest synchronous mode" in text
    assert "(trainer 2 + engine 2 threads, correction none); async trainer 1 + engine 1 threads, correction tis" in text
    assert "seeds reaching it: k = 2 1/1, sync_full 1/1" in text
    # [20/20, 40/10] around 2: (4 - 1) / 2 = 150 %, over the limit
    assert "grid error 150 % (over the limit)" in text
    assert "without env latency" not in text and command == "`rollarc bench async`"
    off = _result([(0.0, 0.4), (40.0, 0.5), (80.0, 0.7)], latency_off=True)  # k = 2 at 60 s: 0.50x
    text = _async({**d, "companions": {"async_nolatency": off}})[0]
    assert "; without env latency k = 2 **0.50×** against `sync_full`" in text
    assert len(text) < 500  # the README has a size limit (test_docs_links)
    gen = {**off, "workload": {"config": "configs/gentail.yaml", "env_latency": False}, "eval_deferred": True}
    text = _async({**d, "companions": {"async_gentail": gen, "async_nolatency": off}})[0]
    assert (
        "; generation tail (`configs/gentail.yaml`, target 0.60, 1 seeds, evaluations deferred): k = 2 **0.50×** "
        "against `sync_full`; without env latency" in text
    )
    assert len(text) < 620


def test_a_fallback_target_and_a_target_inside_the_noise_are_said():
    d = _result([(0.0, 0.4), (10.0, 0.5), (20.0, 0.7)])
    d.update(target_source="fallback, chosen after the runs", target_outside_noise=False)
    text = _async(d)[0]
    assert "(chosen after the runs, within the held-out noise (±0.069))" in text


def test_the_published_file_of_the_earlier_baseline_renders_as_the_readme_has_it():
    d = json.loads((REPO / "docs/benchmarks/async.json").read_text())
    if "baseline_mode" in d:  # the new measurement is published: the README is checked by bench table --check
        return
    result, command = _async(d)
    assert f"| asynchrony | {result} | {where(d)} | {command} |" in readme_block((REPO / "README.md").read_text())
