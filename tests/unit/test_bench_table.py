"""The README's headline table is generated from docs/benchmarks/*.json, and every figure in it is a JSON value."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rollarc.bench.report_file import REPO_ROOT
from rollarc.bench.table import COMPANIONS, END, ROWS, START, main, readme_block, render, source_path, update_readme

JSON_DIR = REPO_ROOT / "docs" / "benchmarks"
README = REPO_ROOT / "README.md"


def json_values(paths: list[Path]) -> list[float]:
    out: list[float] = []

    def walk(x: object) -> None:
        if isinstance(x, bool):
            return
        if isinstance(x, int | float):
            out.append(float(x))
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for p in paths:
        walk(json.loads(p.read_text()))
    return out


def matches(figure: str, values: list[float]) -> bool:
    """A figure printed with d decimals matches a value (or a 100× percentage, or an inverse ratio) rounded to d."""
    target = float(figure)
    candidates = [v for x in values for v in (x, 100 * x, 1 / x if x else 0.0)]
    if "e" in figure:  # scientific: the same mantissa digits
        digits = len(figure.split("e")[0].split(".")[1])
        return any(f"{abs(c):.{digits}e}" == f"{abs(target):.{digits}e}" for c in candidates)
    d = len(figure.split(".")[1]) if "." in figure else 0
    return any(abs(round(abs(c), d) - abs(target)) < 10 ** (-d) / 2 + 1e-12 for c in candidates)


def test_readme_headline_table_is_the_one_the_json_files_generate():
    assert readme_block(README.read_text()) == render(JSON_DIR), "README is stale: run `rollarc bench table`"


def test_every_decimal_figure_in_the_readme_is_a_json_value():
    text = README.read_text()
    names = [s for _, s, _ in ROWS] + [c for s in COMPANIONS.values() for c in s]
    sources = [p for s in names if (p := source_path(s, JSON_DIR)).is_file()]
    values = json_values(sources)
    figures = re.findall(r"(?<![\w.])[+-]?\d+\.\d+(?:e[+-]?\d+)?", text)
    assert figures, "the README shows no decimal figure at all"
    missing = sorted({f for f in figures if not matches(f, values)})
    assert not missing, f"README figures with no JSON source: {missing}"


def test_the_figure_check_can_fail():
    assert not matches("7.79", [7.738744155916969])
    assert matches("7.74", [7.738744155916969])
    assert matches("+41.5", [0.41500000000000004])  # points are 100 × a success fraction
    assert matches("26.5", [0.0377])  # an inverse ratio
    assert matches("7.9e-09", [7.916241884231567e-09]) and not matches("8.0e-09", [7.916241884231567e-09])


def test_every_json_file_has_its_block_in_the_benchmarks_page():
    page = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    for path in JSON_DIR.glob("*.json"):
        name = path.stem
        assert f"<!-- bench:{name}:start -->" in page and f"<!-- bench:{name}:end -->" in page, name


def test_the_rose_row_states_its_companion_windows_figures(tmp_path):
    """The headline ROSE row also gives the second window's speed-up and attainment, read from its own JSON."""
    point = {"speedup_harvest": 1.5, "requests_per_s": 2.0, "lends": 1, "borrowed_turns": 10}
    rose = {"date": "d", "machine": "m", "loads": [point], "slo": {"ttft_p99_ms": 50.0}, "speedup_harvest": 1.5}
    rose |= {"slo_attainment_coserving": 1.0, "slo_attainment_alone": 1.0}
    other = {**rose, "loads": [{**point, "requests_per_s": 7.25, "speedup_harvest": 1.875}], "speedup_harvest": 1.875}
    other |= {"slo_attainment_coserving": 0.981}
    (tmp_path / "rose.json").write_text(json.dumps(rose))
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| ROSE"))
    assert "heavier window" not in row
    (tmp_path / "rose_window1800.json").write_text(json.dumps(other))
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| ROSE"))
    assert "a heavier window (7.2 req/s) **1.88×** at 0.981 vs 1.000" in row


def test_the_rlvr_row_states_its_goal_the_run_without_dynamic_sampling_and_lora(tmp_path):
    seeds = [{"wall_s": 300.0}, {"wall_s": 420.4}, {"wall_s": 350.0}]
    rlvr = {"date": "d", "machine": "m", "per_seed": seeds, "gain_final": [0.8, 0.5, 0.6], "gain_final_median": 0.6}
    rlvr |= {"goal": {"gain_final_min": 0.15, "wall_s_max": 600.0, "gain_final_median": 0.25}, "goal_met": True}
    (tmp_path / "rlvr.json").write_text(json.dumps(rlvr))
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| your dataset"))
    assert "**median +60.0 points**, range +50.0 to +80.0; slowest seed 420 s with its SFT" in row
    assert "(goal: median ≥ +25.0, each ≥ +15.0, within 600 s: met)" in row and "without dynamic" not in row
    (tmp_path / "rlvr_nods.json").write_text(json.dumps({**rlvr, "gain_final_median": 0.125}))
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| your dataset"))
    assert "; without dynamic sampling +12.5 ([why](docs/algorithms.md#the-rlvr-demo))" in row
    (tmp_path / "rlvr_lora.json").write_text(json.dumps({**rlvr, "gain_final_median": 0.331}))
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| your dataset"))
    assert "; without dynamic sampling +12.5, LoRA +33.1 ([why](docs/algorithms.md#the-rlvr-demo))" in row


def test_the_rose_row_gives_the_median_of_the_default_loads_repeats_and_finds_its_rate_by_time_scale(tmp_path):
    points = [
        {"time_scale": 1.0, "speedup_harvest": 1.99, "requests_per_s": 2.0, "lends": 1, "borrowed_turns": 10},
        {"time_scale": 2.0, "speedup_harvest": 1.25, "requests_per_s": 6.4, "lends": 1, "borrowed_turns": 5},
    ]
    runs = [{"speedup_harvest": v} for v in (1.99, 1.26, 1.27)]
    rose = {"date": "d", "machine": "m", "loads": points, "slo": {"ttft_p99_ms": 50.0}, "time_scale": 1.0}
    rose |= {"slo_attainment_coserving": 1.0, "slo_attainment_alone": 1.0, "speedup_harvest": 1.27}
    rose |= {"repeats": {"runs": runs, "speedup_harvest_spread": [1.26, 1.99]}}
    heavier = {**rose, "time_scale": 2.0, "speedup_harvest": 1.5}  # a median equal to no single point
    (tmp_path / "rose.json").write_text(json.dumps(rose))
    (tmp_path / "rose_window1800.json").write_text(json.dumps(heavier))
    row = next(line for line in render(tmp_path).splitlines() if line.startswith("| ROSE"))
    assert "dedicated-only, default load **1.27×** (median of 3 runs, **1.26×**–**1.99×**); attainment 1.000" in row
    assert "a heavier window (6.4 req/s) **1.50×** at 1.000 vs 1.000" in row


def test_rows_read_only_their_json(tmp_path):
    (tmp_path / "engine.json").write_text(
        json.dumps(
            {
                "bench": "engine",
                "date": "2026-01-01",
                "machine": "m, 2 cores",
                "machine_load": {"quiet": False, "other_cpu_share": 0.4},
                "ratio_vs_hf_generate": 3.14159,
                "ratio_vs_hf_generate_batch": 2.5,
                "requests": 7,
                "threads": 1,
            }
        )
    )
    table = render(tmp_path)
    engine = next(line for line in table.splitlines() if line.startswith("| rollout engine"))
    assert "**3.14×**" in engine and "**2.50×**" in engine and "7 long-tailed" in engine
    assert "m, 2 cores, 2026-01-01, **not quiet**" in engine
    assert "| the demo learns | not measured yet |" in table


def test_update_and_check_round_trip(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{START}\nSTALE-ROW\n{END}\n\ntail\n")
    assert main(["--readme", str(readme), "--json-dir", str(JSON_DIR), "--check"]) == 1
    assert update_readme(readme, JSON_DIR) is True
    assert update_readme(readme, JSON_DIR) is False
    assert main(["--readme", str(readme), "--json-dir", str(JSON_DIR), "--check"]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\n") and text.endswith(f"{END}\n\ntail\n") and "STALE-ROW" not in text


def test_a_readme_without_the_block_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# nothing here\n")
    with pytest.raises(ValueError, match="headline"):
        readme_block(readme.read_text())


def test_async_row_says_when_the_target_is_inside_the_noise():
    from rollarc.bench.table import _async

    d = {
        "speedup_k1": 2.0,
        "speedup_k2": 2.5,
        "target_success": 0.41,
        "seeds": 3,
        "time_to_target_s": {"sync": [1.0], "async_k1": [1.0], "async_k2": [1.0]},
        "speedup_to_target_k1": 1.0,
        "speedup_to_target_k2": 1.0,
        "target_noise": 0.069,
        "target_outside_noise": False,
    }
    assert "within the held-out noise (±0.069)" in _async(d)[0]
    d["target_outside_noise"] = True
    assert "noise" not in _async(d)[0]


def test_rose_row_reads_the_loads_of_the_current_json_and_the_curve_of_the_old_one():
    from rollarc.bench.table import _rose

    point = {"speedup_harvest": 1.5, "requests_per_s": 4.0}
    d = {
        "slo_attainment_coserving": 0.99,
        "slo_attainment_alone": 1.0,
        "slo": {"ttft_p99_ms": 90.0},
        "ttft_p99_ms_alone": 60.0,
        "ttft_p99_ms_coserving": 70.0,
        "loads": [point, {"speedup_harvest": 1.25, "requests_per_s": 8.0}],
    }
    assert "**1.25×**–**1.50×** faster" in _rose(d)[0] and "at 4–8 req/s" in _rose(d)[0]
    old = {k: v for k, v in d.items() if k != "loads"} | {"curve": [point]}
    assert "**1.50×**–**1.50×** faster" in _rose(old)[0]


def test_rose_row_says_when_nothing_was_borrowed():
    from rollarc.bench.table import _rose

    loads = [
        {"speedup_harvest": 0.8, "requests_per_s": 1.0, "lends": 0, "borrowed_turns": 0},
        {"speedup_harvest": 1.13, "requests_per_s": 75.0, "lends": 0, "borrowed_turns": 0},
    ]
    d = {"slo_attainment_coserving": 0.983, "slo_attainment_alone": 1.0, "slo": {"ttft_p99_ms": 60.3}, "loads": loads}
    row = _rose(d)[0]
    assert "the guard made 0 lends (0 borrowed turns) at 1–75 req/s" in row
    assert "**0.80×**–**1.13×** dedicated-only" in row and "faster" not in row


def test_spot_row_states_the_recovery_timed_in_training_when_measured():
    from rollarc.bench.table import _spot

    d = {
        "lost_jobs": 0,
        "duplicate_jobs": 0,
        "throughput_ratio_pull_vs_push": 0.89,
        "throughput_ratio_pull_vs_push_high_modelled": 1.17,
        "recovery_s_elastic": 0.053,
        "recovery_s_cold": 4.5,
    }
    assert "inside a training run" not in _spot(d)[0]  # a JSON from before part 2b: nothing made up
    d["recovery_speedup_training"] = 61.25
    assert _spot(d)[0].endswith("; inside a training run **61.25×**")


def test_spot_row_compares_the_regroup_with_the_warm_restart_when_measured():
    from rollarc.bench.table import _spot

    d = {
        "lost_jobs": 0,
        "duplicate_jobs": 0,
        "recovery_s_elastic": 0.05,
        "recovery_s_warm_restart": 0.6,
        "recovery_speedup": 12.0,
        "recovery_s_cold": 4.5,
    }
    assert _spot(d)[0].endswith("; SP regroup after a member's loss 0.050 s vs 0.600 s warm restart (**12.00×**)")
    d["recovery_speedup_training"] = 61.25  # timed against a cold restart: not beside the warm one
    assert "inside a training run" not in _spot(d)[0]
