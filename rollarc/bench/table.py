"""``rollarc bench table``: the README's headline table, generated from ``docs/benchmarks/*.json``.

Every figure in the README's headline table comes from the JSON file that the benchmark measuring it
wrote (:mod:`rollarc.bench.report_file`), so the README can never run ahead of its sources. Each row
below reads one file and formats its values; none holds a number of its own. The table sits between
``<!-- headline:start -->`` and ``<!-- headline:end -->`` in README.md; each benchmark's full run
rewrites it, and ``rollarc bench table`` does on demand (``--check`` only compares, exit 1 when stale;
the test suite runs the same comparison).

A row says on what machine its figure was measured, and whether that machine was quiet, from the
file's own ``machine`` and ``machine_load``. A missing file gives a row that says so.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
START, END = "<!-- headline:start -->", "<!-- headline:end -->"

Row = tuple[str, str]  # (result, how to rerun it)


def times(value: float, digits: int = 2) -> str:
    return f"**{value:.{digits}f}×**"


def points(value: float) -> str:
    return f"{100 * value:+.1f}"


def _demo(d: dict[str, Any]) -> Row:
    gains, walls = d["gain_final"], [s["wall_s"] for s in d["per_seed"]]
    return (
        f"held-out success on unseen 6×6 FrozenLake maps, {len(gains)} seeds: **median {points(d['gain_final_median'])}"
        f" points**, range {points(min(gains))} to {points(max(gains))}; slowest seed {max(walls):.0f} s with its SFT "
        f"(goal: ≥ {points(d['goal']['gain_final_min'])} on every seed within {d['goal']['wall_s_max']:.0f} s: "
        f"{'met' if d['goal_met'] else 'not met'})",
        "`make demo`, `rollarc bench demo`",
    )


def _rlvr(d: dict[str, Any]) -> Row:
    gains, walls = d["gain_final"], [s["wall_s"] for s in d["per_seed"]]
    goal = d["goal"]
    text = (
        f"held-out accuracy on unseen additions, {len(gains)} seeds: **median "
        f"{points(d['gain_final_median'])} points**, range {points(min(gains))} to {points(max(gains))}; slowest "
        f"seed {max(walls):.0f} s with its SFT"
    )
    if "gain_final_median" in goal:
        text += (
            f" (goal: median ≥ {points(goal['gain_final_median'])}, each ≥ {points(goal['gain_final_min'])}, "
            f"within {goal['wall_s_max']:.0f} s: {'met' if d['goal_met'] else 'not met'})"
        )
    companions = d.get("companions", {})
    others = [
        f"{label} {points(c['gain_final_median'])}"
        for label, c in (
            ("without dynamic sampling", companions.get("rlvr_nods")),
            ("LoRA", companions.get("rlvr_lora")),
        )
        if c is not None and c.get("gain_final_median") is not None
    ]
    if others:
        text += f"; {', '.join(others)} ([why](docs/algorithms.md#the-rlvr-demo))"
    return text, "`rollarc bench demo --config configs/rlvr.yaml --publish-as rlvr`"


def _engine(d: dict[str, Any]) -> Row:
    return (
        f"{times(d['ratio_vs_hf_generate'])} the useful tokens/s of HF `generate` (static batches), "
        f"{times(d['ratio_vs_hf_generate_batch'])} transformers' continuous batching ({d['requests']} long-tailed "
        f"requests, {d['threads']} thread)",
        "`rollarc bench engine`",
    )


def _step(d: dict[str, Any]) -> Row:
    def ratio(key: str) -> str:
        stats = d.get(f"{key}_seeds")
        return times(d[key]) if not stats else f"{times(stats['median'])} (range {stats['min']:.2f}–{stats['max']:.2f})"

    seeds = f"median of {d['seeds']} seeds" if d.get("seeds", 1) > 1 else "one seed"
    return (
        f"{d['completions_per_step']} completions of ≤ 12 tokens per step, {seeds}: sync "
        f"{ratio('ratio_sync_vs_inprocess')} and async {ratio('ratio_async_vs_inprocess')} a plain in-process "
        f"HF-`generate` GRPO loop (goals {d['goal']['ratio_sync_vs_inprocess']:.1f}× and "
        f"{d['goal']['ratio_async_vs_inprocess']:.1f}×)",
        "`rollarc bench step`",
    )


def _async(d: dict[str, Any]) -> Row:
    if "baseline_mode" in d:
        return _async_against_baseline(d)
    ttt = d["time_to_target_s"]

    def reached(mode: str) -> str:
        hits = [t for t in ttt[mode] if t is not None]
        return f"{len(hits)}/{len(ttt[mode])} seeds reach it"

    def to_target(key: str) -> str:
        value = d.get(key)
        return times(value) if value is not None else "none (its median seed missed the target)"

    def noise() -> str:
        if d.get("target_outside_noise", True):
            return ""
        return (
            f", but the target is within the held-out noise (±{d['target_noise']:.3f}), so this is not yet a "
            "speed-up at equal quality"
        )

    # a JSON from before `baseline_mode` measured one synchronous mode: `sync` as the config placed it
    return (
        f"time to held-out success {d['target_success']:.3f}, {d['seeds']} seeds, against `sync` as "
        "`configs/longtail.yaml` places it (trainer and engine 1 thread each, TIS), not the strongest "
        f"(both cores per phase: being measured): k = 1 {to_target('speedup_to_target_k1')} ({reached('async_k1')}), "
        f"k = 2 {to_target('speedup_to_target_k2')} ({reached('async_k2')}){noise()} ([why](docs/async.md#measured))",
        "`rollarc bench async`",
    )


def _async_against_baseline(d: dict[str, Any]) -> Row:
    """The row of a run against the strongest synchronous baseline (issue 40): what each side was given, the
    workload, the target and where it came from, the grid error, and the no-latency run when it exists."""
    setups, baseline = d["mode_setup"], d["baseline_mode"]

    def given(mode: str) -> str:
        s = setups[mode]
        rollout = "/".join(str(n) for n in s["threads"]["rollout"])
        return f"trainer {s['threads']['train']} + engine {rollout} threads, correction {s['correction']}"

    def to_target(data: dict[str, Any], k: int) -> str:
        value = data.get(f"speedup_to_target_k{k}")
        return times(value) if value is not None else "none (median seed missed)"

    def reached(mode: str) -> str:
        return f"{sum(t is not None for t in d['time_to_target_s'][mode])}/{len(d['time_to_target_s'][mode])}"

    fixed = "chosen after the runs" if d["target_source"].startswith("fallback") else "fixed before the runs"
    grid = "unbounded" if d["grid_error"] is None else f"{100 * d['grid_error']:.0f} %"
    over = " (over the limit)" if d["grid_error_over_limit"] else ""
    noise = "" if d["target_outside_noise"] else f", within the held-out noise (±{d['target_noise']:.3f})"
    tail = "env latency" if d["workload"]["env_latency"] else "no env latency"
    against = f"`{baseline}`, the fastest synchronous mode ({given(baseline)})" if baseline else "no synchronous mode"
    text = (
        f"time to held-out success {d['target']:.3f} ({fixed}{noise}), `{d['workload']['config']}` ({tail}), "
        f"{d['seeds']} seeds: k = 2 {to_target(d, 2)}, k = 1 {to_target(d, 1)} against {against}; async "
        f"{given('async_k2')}; seeds reaching it: k = 2 {reached('async_k2')}"
        + (f", {baseline} {reached(baseline)}" if baseline else "")
        + f"; grid error {grid}{over}"
    )
    gen = d.get("companions", {}).get("async_gentail")
    if gen is not None:
        text += (
            f"; generation tail (`{gen['workload']['config']}`, target {gen['target']:.2f}, {gen['seeds']} seeds"
            + (", evaluations deferred" if gen.get("eval_deferred") else "")
            + f"): k = 2 {to_target(gen, 2)} against `{gen['baseline_mode']}`"
        )
    off = d.get("companions", {}).get("async_nolatency")
    if off is not None:
        text += f"; without env latency k = 2 {to_target(off, 2)} against `{off['baseline_mode']}`"
    return f"{text} ([why](docs/async.md#measured))", "`rollarc bench async`"


def _chaos(d: dict[str, Any]) -> Row:
    restarts = " / ".join(f"{role} {n}" for role, n in d["restarts"].items())
    return (
        f"env failures, hangs and a killed worker of every role per run ({len(d['seeds'])} seeds): crashed "
        f"{'yes' if d['crashed'] else 'no'}, {d['trajectories_lost']} of {d['trajectories_started']:,} trajectories "
        f"lost, {d['steps_lost']} steps lost, restarts {restarts}; held-out success {points(d['success_gap'])} points "
        f"against clean runs (noise {100 * d['noise_2se']:.1f})",
        "`rollarc bench chaos`",
    )


def _reward(d: dict[str, Any]) -> Row:
    return (
        f"serverless, autoscaled reward service: {times(d['cost_ratio_serverless_vs_peak'])} the replica-seconds of "
        f"a peak-sized dedicated pool at {times(d['p99_ratio_serverless_vs_peak'])} its p99 latency (goal ≤ 0.5× "
        f"the cost within 2× the p99: {'met' if d['goal_met'] else 'not met'})",
        "`rollarc bench reward`",
    )


def _weightsync(d: dict[str, Any]) -> Row:
    cases = "; ".join(
        f"{c['name'].removeprefix('configs/')} ({c['model']}, lr {c['lr']:g}): {times(c['fp32_copy_over_cross_site'], 1)}"
        for c in d["cases"]
        if not c.get("reference")
    )
    return (
        "weight bytes into a borrowed site per step through the relay `rollarc train` runs (bf16 deltas, real AdamW), "
        f"fewer than an fp32 copy: {cases}; bitwise equal: {'yes' if d['bit_exact'] else 'NO'}",
        "`rollarc bench weightsync`",
    )


def _sim(d: dict[str, Any]) -> Row:
    return (
        f"prediction for {d['gpus']:,} GPUs (H800 + H20, async): {times(d['speedup'])} faster per step than a "
        f"monolithic synchronous H800 cluster of equal price, {times(d['cost_per_step_ratio'])} lower cost per step; "
        f"{d['events']:,} events simulated in {d['wall_s']:.1f} s",
        "`rollarc bench sim`",
    )


def _spotlight(d: dict[str, Any]) -> Row:
    def ratio(key: str) -> str:
        value = d.get(key)
        return times(value) if value is not None else "none (the median run missed the target)"

    seeds = len(d["time_to_target_s"]["baseline"])
    # a JSON from before explore.planner named its planner mode "bandit" (UCB1)
    mode = "planner" if "planner" in d["time_to_target_s"] else "bandit"
    label = f"the {d.get('planner', 'contrast')} planner" if mode == "planner" else "the bandit"
    preemptions = d.get("spot", {}).get("explore", {}).get("preemptions")
    # below 1 the mode is slower: "as fast" reads right either way
    where = f", the spot explorer preempted {max(preemptions)}× a run" if preemptions else ""
    return (
        f"Flow-GRPO on a DiT, {seeds} seeds, medians: steps to a held-out reward target {ratio('speedup_steps_explore')} "
        f"fewer with stale-weight seed exploration, {ratio(f'speedup_steps_{mode}')} with {label}; RL wall time to "
        f"it {ratio('speedup_explore')} and {ratio(f'speedup_{mode}')} as fast{where} "
        "([why](docs/diffusion.md#measured))",
        "`rollarc bench spotlight`",
    )


def _spot(d: dict[str, Any]) -> Row:
    modelled = float(
        d.get("throughput_ratio_pull_vs_push_high_modelled", d.get("throughput_ratio_pull_vs_push_high", 0))
    )
    measured = (
        f"pull vs push on Ray {times(d['throughput_ratio_pull_vs_push'])} under the config's trace, "
        if "throughput_ratio_pull_vs_push" in d
        else "pull vs push "
    )
    return (
        f"{d['lost_jobs']} lost and {d['duplicate_jobs']} duplicated jobs under preemption; {measured}"
        f"{times(modelled)} at a high preemption rate (fleet-model prediction); {_sp_recovery(d)}",
        "`rollarc bench spot`",
    )


def _sp_recovery(d: dict[str, Any]) -> str:
    """The SP regroup against a warm restart at the same degree (members on separate nodes), else, in a JSON from
    before it, against the cold restart, with the ratio a training run timed (also against a cold restart)."""
    if "recovery_s_warm_restart" not in d:
        return f"elastic SP regroup {d['recovery_s_elastic']:.3f} s vs {d['recovery_s_cold']:.1f} s cold restart" + (
            _in_training(d.get("recovery_speedup_training"))
        )
    return (
        f"SP regroup after a member's loss {d['recovery_s_elastic']:.3f} s vs {d['recovery_s_warm_restart']:.3f} s "
        f"warm restart ({times(d['recovery_speedup'])})"
    )


def _in_training(ratio: float | None) -> str:
    """The SP recovery speed-up a training run timed (bench spot part 2b), when the JSON has one."""
    return "" if ratio is None else f"; inside a training run {times(ratio)}"


def _rose(d: dict[str, Any]) -> Row:
    points = d["loads"] if "loads" in d else d["curve"]  # "curve": the JSON of the harness's runs, before "loads"
    speedups = [c["speedup_harvest"] for c in points]
    rates = [c["requests_per_s"] for c in points]
    if all("lends" in c for c in points):  # the training path's actors: say whether anything was borrowed at all
        lends, borrowed = sum(c["lends"] for c in points), sum(c["borrowed_turns"] for c in points)
        other = d.get("companions", {}).get("rose_window1800")
        rate = _default_rate(other) if other else 0.0
        heavier = (
            f"; a heavier window ({rate:.1f} req/s) {times(other['speedup_harvest'])} at "
            f"{other['slo_attainment_coserving']:.3f} vs {other['slo_attainment_alone']:.3f}"
            if other
            else ""
        )
        return (
            f"on the training path the guard made {lends} lends ({borrowed} borrowed turns) at "
            f"{min(rates):.0f}–{max(rates):.0f} req/s of the Azure trace, SLO TTFT p99 {d['slo']['ttft_p99_ms']:.0f} "
            f"ms; rollouts {times(min(speedups))}–{times(max(speedups))} dedicated-only{_repeats(d)}; attainment "
            f"{d['slo_attainment_coserving']:.3f} co-serving vs {d['slo_attainment_alone']:.3f} alone{heavier} "
            "([why](docs/rose.md#the-benchmark-rollarc-bench-rose))",
            "`rollarc bench rose --trace …`",
        )
    return (
        f"rollouts {times(min(speedups))}–{times(max(speedups))} faster with borrowed serving capacity at "
        f"{min(rates):.0f}–{max(rates):.0f} req/s of the Azure conversation trace; serving SLO attainment "
        f"{d['slo_attainment_coserving']:.3f} co-serving vs {d['slo_attainment_alone']:.3f} alone (SLO TTFT p99 "
        f"{d['slo']['ttft_p99_ms']:.0f} ms; measured p99 {d['ttft_p99_ms_alone']:.0f} ms alone, "
        f"{d['ttft_p99_ms_coserving']:.0f} ms co-serving)",
        "`rollarc bench rose --trace …`",
    )


def _rose_train(d: dict[str, Any]) -> Row:
    """ROSE timed inside ``rollarc train`` (``bench rose --train``): once measured, the ROSE row."""

    def num(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    s, grid, seeds = d["speedup_to_target_harvest"], d["speedup_to_target_grid_bound"], d["per_seed"]
    reached = {k: sum(r[k]["time_to_target_s"] is not None for r in seeds) for k in ("harvest", "alone")}
    if s["median"] is not None:
        bound = "" if grid["low"] is None else f" (grid bound {grid['low']:.2f}–{num(grid['high'], '.2f')})"
        to_target = f"time to it {times(s['median'])} shorter with borrowing{bound}"
    else:  # a median run missed the target: say who reached it, and the ratio where both did
        both = [r["speedup_to_target"] for r in seeds if r["speedup_to_target"] is not None]
        where = f"; where both did: {', '.join(f'{v:.2f}×' for v in both)}" if both else ""
        to_target = f"reached by {reached['harvest']}/{len(seeds)} runs with borrowing, {reached['alone']}/{len(seeds)} without{where}"
    rate = d["trained_traj_s_ratio"]
    cross = d["cross_site_bytes_per_step"]["median"]
    return (
        f"inside `rollarc train`, {d['seeds']} seeds, the same serving in both runs: held-out "
        f"{d['target']['success']:.3f} {to_target}; trained trajectories/s {times(rate['median'])} "
        f"({num(rate['min'], '.2f')}–{num(rate['max'], '.2f')}); serving attainment "
        f"{num(d['slo_attainment_training'], '.3f')} with borrowing vs {num(d['slo_attainment_alone'], '.3f')} without; "
        f"{num(d['guard_actions']['slo_caused'], 'd')} guard actions for the SLO; "
        f"{num(None if cross is None else cross / 1e6, '.2f')} MB/step into the borrowed site (goal "
        f"≥ {d['goal']['speedup_to_target_min']:.1f}×: {'met' if d['goal_met'] else 'not met'}) "
        "([why](docs/rose.md#timed-inside-rollarc-train))",
        "`rollarc bench rose --train`",
    )


def _default_rate(d: dict[str, Any]) -> float:
    """The default load point's serving rate (before ``time_scale`` was recorded: the point with the top-level
    speed-up, which was that point's own)."""
    if "time_scale" in d:
        return float(next(c["requests_per_s"] for c in d["loads"] if c["time_scale"] == d["time_scale"]))
    return next((c["requests_per_s"] for c in d["loads"] if c["speedup_harvest"] == d["speedup_harvest"]), 0.0)


def _repeats(d: dict[str, Any]) -> str:
    """The default load's median over its repeats, when it ran more than once (bench rose --repeats)."""
    runs = d.get("repeats", {}).get("runs", [])
    if len(runs) < 2:
        return ""
    low, high = d["repeats"]["speedup_harvest_spread"]
    return f", default load {times(d['speedup_harvest'])} (median of {len(runs)} runs, {times(low)}–{times(high)})"


def _device(d: dict[str, Any]) -> Row:
    a, f, t = d["agreement"], d["fsdp2"], d["throughput"]
    return (
        f"bf16 engine agrees with HF `generate` on {100 * a['token_agreement']:.1f} % of greedy tokens; FSDP2 step "
        f"equals the plain step within {f['max_abs_param_diff']:.1e}; the engine is only {times(t['engine_over_hf'])} HF "
        "`generate` there ([details](docs/gpu.md#device-check-results))",
        "`scripts/device_check.sh`",
    )


# (what, the JSON file's name under docs/benchmarks/, row); ``device`` is scripts/device_check.sh's output
# from a lent H200, copied there as it came back
ROWS: list[tuple[str, str, Callable[[dict[str, Any]], Row]]] = [
    ("the demo learns", "demo", _demo),
    ("your dataset and reward", "rlvr", _rlvr),
    ("rollout engine", "engine", _engine),
    ("short tasks", "step", _step),
    ("asynchrony", "async", _async),
    ("chaos", "chaos", _chaos),
    ("serverless reward", "reward", _reward),
    ("weight sync", "weightsync", _weightsync),
    ("diffusion RL (Spotlight)", "spotlight", _spotlight),
    ("spot capacity", "spot", _spot),
    ("ROSE co-serving", "rose_train", _rose_train),
    ("ROSE co-serving", "rose", _rose),
    ("simulation", "sim", _sim),
    ("GPU check", "device", _device),
]


# JSON files a row also reads (under ``companions`` of its own), where the row states another run's figure
COMPANIONS: dict[str, list[str]] = {
    "rose": ["rose_window1800"],
    "async": ["async_gentail", "async_nolatency"],
    "rlvr": ["rlvr_nods", "rlvr_lora"],
}


# Rows left out until their file exists: ROSE's training-path figure, which then leads the synthetic one
OPTIONAL = frozenset({"rose_train"})
# A row's label once another file exists: (that file, the label)
RELABEL: dict[str, tuple[str, str]] = {"rose": ("rose_train", "ROSE, synthetic trajectories (no trainer)")}


def source_path(source: str, json_dir: Path) -> Path:
    return json_dir / f"{source}.json"


def where(d: dict[str, Any]) -> str:
    """The machine column: the file's machine, date and quietness."""
    if "device" in d:
        return f"{d['device']} (GPU)"
    load = d.get("machine_load")
    quiet = "load not recorded" if load is None else ("quiet" if load["quiet"] else "**not quiet**")
    return f"{d['machine']}, {d['date']}, {quiet}"


def render(json_dir: Path) -> str:
    """The whole table, from the JSON files in ``json_dir``."""
    lines = ["| what | result | measured on | command |", "|---|---|---|---|"]
    for what, source, row in ROWS:
        path = source_path(source, json_dir)
        if not path.is_file():
            if source not in OPTIONAL:
                lines.append(f"| {what} | not measured yet | | |")
            continue
        if (beside := RELABEL.get(source)) is not None and source_path(beside[0], json_dir).is_file():
            what = beside[1]
        data = json.loads(path.read_text())
        companions = {
            c: json.loads(p.read_text())
            for c in COMPANIONS.get(source, [])
            if (p := source_path(c, json_dir)).is_file()
        }
        result, command = row({**data, "companions": companions} if companions else data)
        lines.append(f"| {what} | {result} | {where(data)} | {command} |")
    return "\n".join(lines)


def readme_block(text: str) -> str:
    if START not in text or END not in text:
        raise ValueError(f"README has no {START} ... {END} block")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def update_readme(readme: Path, json_dir: Path) -> bool:
    """Rewrite the README's headline block from the JSON files; ``True`` if it changed."""
    text = readme.read_text()
    if START not in text:
        return False
    table = render(json_dir)
    if readme_block(text) == table:
        return False
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    tmp = readme.with_name(f".{readme.name}.tmp")
    tmp.write_text(f"{head}{START}\n{table}\n{END}{tail}")
    tmp.replace(readme)
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc bench table", description=__doc__.split("\n")[0])
    parser.add_argument("--readme", default=str(REPO_ROOT / "README.md"))
    parser.add_argument("--json-dir", default=str(REPO_ROOT / "docs" / "benchmarks"))
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if the README is stale")
    args = parser.parse_args(argv)
    readme, json_dir = Path(args.readme), Path(args.json_dir)
    if args.check:
        stale = readme_block(readme.read_text()) != render(json_dir)
        print(f"{readme}: headline table {'is stale: run rollarc bench table' if stale else 'is up to date'}")
        return 1 if stale else 0
    print(f"{readme}: {'rewritten' if update_readme(readme, json_dir) else 'already up to date'}")
    return 0
