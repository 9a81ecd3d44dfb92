"""``rollarc bench rose --train``: the figures from its runs' records (hand-computed), and the runs it configures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollarc.bench import rose_train
from rollarc.bench.rose_train import QUICK, combine, default_trace, harvest_records, seed_row, setup_overrides
from rollarc.bench.rose_train_figures import (
    goal_met,
    pooled_attainment,
    seed_target,
    slo_actions,
    speedup,
    summed_actions,
)
from rollarc.bench.table import render
from rollarc.bench.time_to_target import Crossing, crossing
from rollarc.config import load_train_config
from rollarc.config.harvest import HarvestConfig
from rollarc.config.io import load_config
from rollarc.rose.config import RoseConfig
from rollarc.runtime.rose_setup import PolicySpec, defaults_record


def test_the_target_is_given_or_a_gain_over_the_warm_start():
    assert seed_target(0.40, 0.55, 0.10) == 0.55
    assert seed_target(0.40, None, 0.10) == pytest.approx(0.50)


def test_the_speed_up_is_of_interpolated_crossings_with_the_bounds_the_grid_allows():
    # alone crosses 0.5 between (30 s, 0.48) and (40 s, 0.55): 30 + 10 * 0.02 / 0.07 = 32.857 s;
    # harvest between (10 s, 0.45) and (20 s, 0.52): 10 + 10 * 0.05 / 0.07 = 17.143 s
    alone = crossing([(0.0, 0.40), (20.0, 0.45), (30.0, 0.48), (40.0, 0.55)], 0.5)
    harvest = crossing([(0.0, 0.40), (10.0, 0.45), (20.0, 0.52)], 0.5)
    out = speedup([alone], [harvest])
    assert out["speedup"] == pytest.approx((30 + 20 / 7) / (10 + 50 / 7))  # 1.9167
    assert (out["low"], out["high"]) == (30.0 / 20.0, 40.0 / 10.0)  # the grid's extremes
    assert out["grid_rel"] == pytest.approx((4.0 - 1.5) / out["speedup"]) and out["within_tolerance"] is False
    # three seeds: medians of the times, of the lower and of the upper bounds
    a = [Crossing(33.0, 30.0, 34.0, 1), Crossing(40.0, 39.0, 41.0, 1), Crossing(50.0, 49.0, 51.0, 1)]
    h = [Crossing(20.0, 19.5, 20.5, 1), Crossing(25.0, 24.5, 25.5, 1), Crossing(30.0, 29.0, 31.0, 1)]
    out = speedup(a, h)
    assert (out["speedup"], out["low"], out["high"]) == (40.0 / 25.0, 39.0 / 25.5, 41.0 / 24.5)
    assert out["within_tolerance"] is True  # (41/24.5 - 39/25.5) / 1.6 = 0.090
    # the harvest run's median seed never reached the target: no speed-up
    assert speedup(a, [h[0], None, None])["speedup"] is None
    assert speedup([alone], [Crossing(20.0, 0.0, 20.0, 1)])["high"] is None  # it may have crossed at 0 s


def test_attainment_is_pooled_by_requests_and_a_missing_seed_gives_none():
    # (100 * 1.0 + 300 * 0.99) / 400 = 0.9925
    assert pooled_attainment([(100, 1.0), (300, 0.99)]) == pytest.approx(0.9925)
    assert pooled_attainment([(100, 1.0), None]) is None
    assert pooled_attainment([(0, 1.0)]) is None
    assert pooled_attainment([]) is None


def test_guard_actions_are_summed_by_cause_and_the_slo_caused_ones_counted():
    a = {"slo_pauses": 2, "slo_preemptions": 1, "withdrawals": 0, "memory_pauses": 5, "slot_pauses": 1}
    b = {"slo_pauses": 0, "slo_preemptions": 0, "withdrawals": 3, "memory_pauses": 0, "slot_pauses": 4}
    total = summed_actions([a, b])
    assert total == {"slo_pauses": 2, "slo_preemptions": 1, "withdrawals": 3, "memory_pauses": 5, "slot_pauses": 5}
    assert slo_actions(total) == 6  # memory and slot pauses are not the SLO's
    assert summed_actions([a, None]) is None and slo_actions(None) is None


def test_the_goal_needs_the_speed_up_slo_actions_and_attainment_within_half_a_point():
    assert goal_met(1.3, 1, 1.0, 0.995) is True
    assert goal_met(1.29, 1, 1.0, 1.0) is False
    assert goal_met(1.5, 0, 1.0, 1.0) is False
    assert goal_met(1.5, 3, 1.0, 0.994) is False
    assert goal_met(None, 3, 1.0, 1.0) is False
    assert goal_met(1.5, 3, None, 1.0) is False


def _run(curve, rl_wall_s, traj_s, records):
    return {
        "curve": curve,
        "rl_wall_s": rl_wall_s,
        "trajectories_per_s": traj_s,
        "success_before": curve[0][1],
        "success": curve[-1][1],
        "records": records,
    }


def _records(slo, serving, actions, borrowed, cross):
    return {
        "slo": slo,
        "serving": serving,
        "guard_actions": actions,
        "borrowed_turns": borrowed,
        "bytes": None
        if cross is None
        else {"cross_site_bytes_per_step": cross, "in_site_bytes_per_step": cross / 2, "full_copy_bytes": 1000.0},
        "wall_s": 100.0,
    }


def test_a_seed_row_and_the_headline_from_two_runs_per_seed():
    slo = {"ttft_p99_ms": 80.0, "tpot_p99_ms": 20.0, "alone": {"requests": 100, "attainment": 1.0}}
    serving = {"requests": 300, "slo_met": 297, "attainment": 0.99}
    actions = {"slo_pauses": 2, "slo_preemptions": 0, "withdrawals": 1, "memory_pauses": 4}
    runs = {
        "harvest": _run(
            [(0.0, 0.4), (10.0, 0.45), (20.0, 0.52)], 30.0, 3.0, _records(slo, serving, actions, 50, 200.0)
        ),
        "alone": _run(
            [(0.0, 0.4), (20.0, 0.45), (30.0, 0.48), (40.0, 0.55)],
            50.0,
            2.0,
            _records(slo, {"requests": 200, "slo_met": 200, "attainment": 1.0}, actions, 0, 0.0),
        ),
    }
    row = seed_row(0, runs, 0.5)
    assert row["speedup_to_target"] == pytest.approx((30 + 20 / 7) / (10 + 50 / 7))
    assert row["speedup_grid_bound"] == [1.5, 4.0] and row["harvest"]["time_to_target_grid_s"] == [10.0, 20.0]
    assert row["trained_traj_s_ratio"] == 1.5
    assert (row["slo_attainment_alone"], row["slo_attainment_training"]) == (1.0, 0.99)
    assert (row["harvest"]["borrowed_turns"], row["alone"]["borrowed_turns"]) == (50, 0)
    assert row["cross_site_bytes_per_step"] == 200.0
    out = combine([row])
    assert out["speedup_to_target_harvest"]["median"] == pytest.approx(row["speedup_to_target"])
    assert out["slo_attainment_alone"] == 1.0 and out["slo_attainment_training"] == pytest.approx(0.99)
    assert out["guard_actions"]["slo_caused"] == 3
    assert out["slo"]["ttft_p99_ms"] == 80.0
    assert out["goal_met"] is False  # 0.99 is a point below serving alone
    # the attainment "alone" is the run that does not borrow, after its own calibration: not the calibration sample
    runs["alone"]["records"]["serving"] = {"requests": 200, "slo_met": 190, "attainment": 0.95}
    assert combine([seed_row(0, runs, 0.5)])["slo_attainment_alone"] == 0.95
    # runs made before the SLO and the guard's causes were recorded: null, never a made-up value
    runs["harvest"]["records"] = _records(None, None, None, 50, 200.0)
    runs["alone"]["records"] = _records(None, None, None, 0, None)
    old = combine([seed_row(0, runs, 0.5)])
    assert old["slo_attainment_alone"] is None and old["guard_actions"]["summed"] is None
    assert old["slo"]["ttft_p99_ms"] is None and old["goal_met"] is False


def test_records_are_read_from_the_run_and_absent_ones_are_none(tmp_path):
    rows = [
        {"step": 1, "cross_site_bytes": 100, "in_site_bytes": 50, "full_copy_bytes": 1000, "harvest_turns_done": 7},
        {"step": 2, "cross_site_bytes": 300, "in_site_bytes": 70, "full_copy_bytes": 1000, "harvest_turns_done": 19},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "summary.json").write_text(json.dumps({"wall_s": 12.5, "harvest_serving": {"requests": 3}}))
    got = harvest_records(tmp_path)
    assert got["borrowed_turns"] == 19 and got["bytes"]["cross_site_bytes_per_step"] == 200.0
    assert got["serving"] == {"requests": 3} and got["slo"] is None and got["guard_actions"] is None
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.1}) + "\n")
    alone = harvest_records(tmp_path)
    assert alone["borrowed_turns"] == 0 and alone["bytes"] is None


def test_both_setups_train_the_harvest_config_on_the_same_roles_and_serving_and_only_one_lends(tmp_path):
    harvest = load_train_config("configs/harvest.yaml", [*QUICK, *setup_overrides("harvest", 3)])
    alone = load_train_config("configs/harvest.yaml", [*QUICK, *setup_overrides("alone", 3)])
    assert harvest.harvest is not None and alone.harvest is not None
    assert harvest.harvest.lend is True and alone.harvest.lend is False
    assert harvest.harvest.model_copy(update={"lend": False}) == alone.harvest  # the same serving, trace and SLO rule
    assert harvest.seed == alone.seed == 3
    assert harvest.cluster == alone.cluster and harvest.train == alone.train and harvest.model == alone.model


def test_the_trace_is_the_flag_else_the_workspace_trace_when_present(tmp_path):
    trace = tmp_path / "t.csv"
    assert default_trace(str(trace)) == str(trace.resolve())
    assert default_trace(None, tmp_path / "absent.csv") is None
    trace.write_text("x")
    assert default_trace(None, trace) == str(trace)
    assert rose_train.TRACE.parts[-3:] == ("shared", "traces", "azure_llm_2023_conv.csv")


def test_a_config_without_harvest_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        rose_train.main(["--config", "configs/quickstart.yaml", "--quick"])
    assert "has no harvest: section" in capsys.readouterr().err


def test_the_rose_benchmark_defaults_are_those_training_runs():
    """Issue 41 item 3: dedicated_first, the prefix cache and migration (the drain before a withdrawal's abort)
    are training's in `rollarc bench rose` too, and its JSON records them."""
    train = load_train_config("configs/harvest.yaml", [])
    assert train.harvest is not None
    rose = RoseConfig()
    assert (
        rose.dedicated_first is train.harvest.dedicated_first is HarvestConfig.model_fields["dedicated_first"].default
    )
    assert load_config(RoseConfig, Path("configs/rose.yaml"), []).dedicated_first is train.harvest.dedicated_first
    assert PolicySpec().prefix_cache_tokens == train.engine.prefix_cache_tokens == 0
    for key in ("margin", "memory_tokens", "lend_after_s", "withdraw_after_s", "min_capacity", "budget_aftermath"):
        assert getattr(rose, key) == HarvestConfig.model_fields[key].default, key
    assert defaults_record(rose, PolicySpec()) == {
        "dedicated_first": False,
        "prefix_cache_tokens": 0,
        "drain_timeout_s": train.harvest.drain_timeout_s,
    }


def test_the_training_path_figure_becomes_the_rose_row_and_the_synthetic_one_stays_labelled(tmp_path):
    docs = Path("docs/benchmarks")
    (tmp_path / "rose.json").write_text((docs / "rose.json").read_text())
    without = render(tmp_path)
    assert [line.split(" | ")[0] for line in without.splitlines() if "ROSE" in line] == ["| ROSE co-serving"]
    slo = {"ttft_p99_ms": 80.0, "tpot_p99_ms": 20.0, "alone": {"requests": 100, "attainment": 1.0}}
    serving = {"requests": 300, "slo_met": 300, "attainment": 1.0}
    actions = {"slo_pauses": 2, "slo_preemptions": 1, "withdrawals": 1, "memory_pauses": 4}
    runs = {
        "harvest": _run([(0.0, 0.4), (10.0, 0.45), (20.0, 0.52)], 30.0, 3.0, _records(slo, serving, actions, 50, 2e6)),
        "alone": _run(
            [(0.0, 0.4), (20.0, 0.45), (30.0, 0.48), (40.0, 0.55)], 50.0, 2.0, _records(slo, serving, actions, 0, 0.0)
        ),
    }
    row = seed_row(0, runs, 0.5)
    result = {
        **combine([row]),
        "per_seed": [row],
        "target": {"success": 0.5},
        "seeds": 1,
        "trace": "azure_llm_2023_conv.csv",
        "machine": "x86_64, 2 cores",
        "date": "2026-12-05",
        "machine_load": {"quiet": True},
    }
    (tmp_path / "rose_train.json").write_text(json.dumps(result))
    rows = [line for line in render(tmp_path).splitlines() if "ROSE" in line]
    assert [line.split(" | ")[0] for line in rows] == [
        "| ROSE co-serving",
        "| ROSE, synthetic trajectories (no trainer)",
    ]
    assert "time to it **1.92×** shorter with borrowing" in rows[0] and "4 guard actions for the SLO" in rows[0]
    assert "2.00 MB/step" in rows[0] and "goal ≥ 1.3×: met" in rows[0]
    # a median run that missed the target: who reached it, and the ratio where both did (never a made-up median)
    missed = {**result, "speedup_to_target_harvest": {**result["speedup_to_target_harvest"], "median": None}}
    missed["per_seed"] = [
        {**result["per_seed"][0], "alone": {**result["per_seed"][0]["alone"], "time_to_target_s": None}}
    ]
    (tmp_path / "rose_train.json").write_text(json.dumps(missed))
    (row,) = [line for line in render(tmp_path).splitlines() if "ROSE co-serving" in line]
    assert "reached by 1/1 runs with borrowing, 0/1 without; where both did: 1.92×" in row
    assert (
        rows[1].split(" | ", 1)[1] == next(line for line in without.splitlines() if "ROSE" in line).split(" | ", 1)[1]
    )
