"""``rollarc bench rose``: rollouts on dedicated workers only vs dedicated plus borrowed co-serving capacity.

It runs the actors of ``rollarc train`` with ``harvest:`` (``rollarc.runtime.rose_setup``): the co-serving
replica started and lent by the HarvestPool, a dedicated RolloutWorker, and the Router in front of both. Three
set-ups on the same cores (the co-serving replica pinned to ``serving_cores``, the dedicated worker to
``rollout_cores``), each replaying the same trace window against the serving model S:

- **serving alone**: the SLO attainment and p99 TTFT the co-serving replica reaches by itself (never lent);
- **dedicated only**: multi-turn rollouts of the policy R through the Router on the dedicated worker only;
- **dedicated + borrowed**: the co-serving replica is also lent to the Router while its guard reports headroom.

Rollout throughput is measured alike in both: turns finished through the Router while the window was served,
in trajectory-equivalents per second (turns / turns per trajectory / window), and generated tokens per second.

**The SLO binds**: unless ``slo_alone_factor`` is 0, the SLO is derived first from a serving-alone run at the
default load (``slo_alone_factor`` x its TTFT and TPOT p99, recorded under ``slo``) and used for every set-up
and load point. The guard keeps that SLO, so it has to act. ``speedup_harvest`` = trajectories/s with borrowing
/ without. ``slo_attainment_coserving`` must stay within 0.005 of ``slo_attainment_alone``. ``loads`` repeats
the comparison at several trace time scales (heavier load to the right); a full run adds heavier points until
the guard acts at the heaviest (``guard_binds``), up to 16x the default. ``guard_actions`` counts pauses,
preemptions and withdrawals at the default load, by cause as in training (``rollarc.rose.guard_actions``). ``--repeats N`` runs the default load N times in all (each with its
own serving-alone run; the N alone runs go first, and the SLO is derived from their requests pooled): ``speedup_harvest`` is then the median with ``repeats.speedup_harvest_spread``,
and both attainments pool every repeat's requests (one run's 59 requests cannot resolve a 0.5-point margin).
``cross_site_bytes_per_step``: bytes that crossed into the borrowed site per step of a short real
``rollarc train configs/harvest.yaml`` at its training lr (``bench/rose_bytes.py``; ``in_site_bytes_per_step`` the
bytes fanned out inside it). ``cross_site_bytes_ratio_modelled``: bytes that cross into the
borrowed site per policy version (one sparse bf16 delta of a real tiny-policy AdamW step at lr 1e-6, fanned out
inside the site, planned by ``rose.sites``: a model, not a measurement) over full bf16 copies sent to each
borrowed worker.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollarc.bench.harness import add_overrides, bench_parser, command, finish, refuse_unnamed_overrides
from rollarc.bench.report_file import markdown_table
from rollarc.bench.rose_bytes import measured_cross_site_bytes
from rollarc.bench.weightsync import real_updates
from rollarc.config.io import load_config
from rollarc.rose.calibration import derive_slo
from rollarc.rose.config import RoseConfig
from rollarc.rose.guard_actions import guard_actions as actions_by_cause
from rollarc.rose.sites import bytes_per_hop, cross_site_bytes, plan_hops
from rollarc.rose.slo import SLOConfig, latencies, misses, summarize
from rollarc.rose.trace import TraceRequest, read_trace, scale, synthetic_trace
from rollarc.runtime.rose_setup import (
    Mode,
    PolicySpec,
    SetupResult,
    defaults_record,
    rose_cluster,
    run_setup,
    write_policy,
)


@dataclass(frozen=True)
class Policy:
    """The policy checkpoint every set-up's replicas load, and its vocabulary (the prompts' ids)."""

    path: str
    vocab_size: int

    def run(self, mode: Mode, rose: RoseConfig, window: list[TraceRequest]) -> SetupResult:
        return run_setup(mode, rose, window, policy_dir=self.path, vocab_size=self.vocab_size)


def load_trace(path: str | None, seed: int) -> list[TraceRequest]:
    """The trace file, or (none given) an hour of synthetic traffic shaped like the Azure conversation trace."""
    if path is not None:
        return read_trace(path)
    return synthetic_trace(3600.0, 5.5, seed=seed, burst_every_s=300.0, burst_len_s=60.0, burst_factor=3.0)


def cross_site_bytes_ratio(borrowed_workers: int, quick: bool) -> tuple[float, int, int, dict[str, int]]:
    """(ratio, delta bytes, full bytes, bytes per hop) of one version sent to one borrowed site.

    The ratio is the bytes crossing into the borrowed site (one sparse delta, fanned out inside the site by
    the relay's tree) over full bf16 copies sent to each of the ``borrowed_workers``.
    """
    steps = 2 if quick else 4
    r = real_updates(1e-6, 2 if quick else 5, steps)
    delta, full = r.delta_bytes // steps, r.full_bytes // steps
    sites = {"train": ["ded0"], "serving": [f"borrowed{i}" for i in range(borrowed_workers)]}
    hops = plan_hops(sites, "train", delta, full)
    return cross_site_bytes(hops) / (full * borrowed_workers), delta, full, bytes_per_hop(hops)


def load_window(rose: RoseConfig, trace: list[TraceRequest], time_scale: float) -> list[TraceRequest]:
    """The replayed window of ``trace`` at ``time_scale`` (arrivals from 0).

    ``replay.offset_s`` is in the default load's scaled time (``replay.time_scale``), as in training; every load
    point starts at that same moment of the original trace, so the points differ in load, not in which part of
    the trace they replay (an offset kept in each point's own scaled time would move the window's start).
    """
    replay = rose.replay
    start = replay.offset_s * replay.time_scale / time_scale  # the same original moment at every time scale
    scaled = scale(
        trace,
        time_scale,
        replay.token_scale,
        max_prompt_tokens=replay.max_prompt_tokens,
        max_output_tokens=replay.max_output_tokens,
    )
    window = [
        TraceRequest(r.arrival_s - start, r.prompt_tokens, r.output_tokens)
        for r in scaled
        if start <= r.arrival_s <= start + replay.duration_s
    ]
    if not window:
        raise ValueError(
            f"no requests in the trace window offset_s={replay.offset_s} duration_s={replay.duration_s} "
            f"at time scale {time_scale:g}"
        )
    return window


def derived_slo(rose: RoseConfig, alone: list[SetupResult]) -> SLOConfig:
    """``slo_alone_factor`` x the TTFT and TPOT p99 over every request of the serving-alone runs, pooled
    (``slo:`` as given when the factor is 0). One run's p99 of about 60 requests is nearly its maximum, so a
    single quick or slow run set the SLO for every set-up after it; pooled runs give a steadier tail."""
    if rose.slo_alone_factor == 0:
        return rose.slo
    return derive_slo([r for run in alone for r in latencies(run.timings)], rose.slo_alone_factor)


def run_alone(policy: Policy, rose: RoseConfig, window: list[TraceRequest], time_scale: float) -> SetupResult:
    print(f"time scale {time_scale:g}: alone ({len(window)} serving requests)", flush=True)
    return policy.run("alone", rose, window)


def serving_step_ratio(counters: dict[str, int]) -> dict[str, float | None]:
    """Serving steps' measured over predicted time, after a rollout step and after a serving step (None: no such
    step). The same latency model predicts both, so a higher ratio after rollout is what a rollout step costs the
    serving step that follows it (caches it evicted), beyond its own length."""
    return {
        after: counters[f"serving_after_{after}_us"] / counters[f"serving_after_{after}_predicted_us"]
        if counters.get(f"serving_after_{after}_predicted_us")
        else None
        for after in ("rollout", "serving")
    }


def one_load(
    policy: Policy,
    rose: RoseConfig,
    trace: list[TraceRequest],
    time_scale: float,
    alone_run: SetupResult | None = None,
) -> dict[str, Any]:
    """The three set-ups at one load, scored against ``rose.slo`` (the derived SLO); ``alone_run``: already run."""
    window = load_window(rose, trace, time_scale)
    runs: dict[str, SetupResult] = {"alone": alone_run or run_alone(policy, rose, window, time_scale)}
    modes: tuple[Mode, ...] = ("dedicated", "harvest")
    for mode in modes:
        print(f"time scale {time_scale:g}: {mode} ({len(window)} serving requests)", flush=True)
        runs[mode] = policy.run(mode, rose, window)
    alone = summarize(runs["alone"].timings, rose.slo)
    dedicated = summarize(runs["dedicated"].timings, rose.slo)
    coserving = summarize(runs["harvest"].timings, rose.slo)
    harvest = runs["harvest"]
    serve_counters = harvest.counters
    guard_actions = actions_by_cause(serve_counters, harvest.lending["withdrawals"])  # as training's, by cause
    dedicated_turns = harvest.routed.get("dedicated", 0)
    row: dict[str, Any] = {
        "time_scale": time_scale,
        "requests": len(window),
        "requests_per_s": len(window) / rose.replay.duration_s,
        "rollout_traj_s_dedicated": runs["dedicated"].traj_per_s,
        "rollout_traj_s_harvest": harvest.traj_per_s,
        "rollout_tokens_s_dedicated": runs["dedicated"].tokens_per_s,
        "rollout_tokens_s_harvest": harvest.tokens_per_s,
        "speedup_harvest": harvest.traj_per_s / runs["dedicated"].traj_per_s if runs["dedicated"].traj_per_s else 0.0,
        "slo_attainment_alone": alone["slo_attainment"],
        "slo_attainment_dedicated_setup": dedicated["slo_attainment"],
        "slo_attainment_coserving": coserving["slo_attainment"],
        "ttft_p99_ms_alone": alone["ttft_p99_ms"],
        "ttft_p99_ms_coserving": coserving["ttft_p99_ms"],
        "tpot_p99_ms_alone": alone["tpot_p99_ms"],
        "tpot_p99_ms_coserving": coserving["tpot_p99_ms"],
        "preemptions": serve_counters["preemptions"],
        "pauses": serve_counters["pauses"],
        "borrowed_rollout_steps": serve_counters["rollout_steps"],
        "rollout_overruns": serve_counters["rollout_overruns"],  # steps > 1.5x their prediction (+2 ms)
        # engine time of the borrowed rollout steps, and the replica's loop time after them (fed to the guard's model)
        "rollout_ms": serve_counters["rollout_ms"],
        "loop_gap_ms": serve_counters["loop_gap_ms"],
        # the co-serving replica's garbage-collector pauses per set-up (every serving step stalls for them)
        "gc_ms": {mode: sum(run.counters.get(f"gc_ms_gen{g}", 0) for g in range(3)) for mode, run in runs.items()},
        "gc_max_ms": {mode: run.counters.get("gc_max_ms", 0) for mode, run in runs.items()},
        "gc_collections_gen2": {mode: run.counters.get("gc_collections_gen2", 0) for mode, run in runs.items()},
        # serving steps' measured / predicted time, right after a rollout step and right after a serving step
        "serving_step_ratio": {mode: serving_step_ratio(run.counters) for mode, run in runs.items()},
        "withdrawals": harvest.lending["withdrawals"],
        "lends": harvest.lending["lends"],
        "guard_actions": guard_actions,
        "migrated_turns": harvest.lending["migrated_turns"],  # aborted on withdrawal, resumed from partial output
        "borrowed_turns": harvest.routed.get("borrowed", 0),
        # within the harvest run alone (immune to load drift between runs): all turns / the dedicated worker's
        "speedup_within_run": sum(harvest.routed.values()) / max(1, dedicated_turns),
        "versions_kept": harvest.turn_versions_ok and runs["dedicated"].turn_versions_ok,
        # the guard's latency models at the end of the harvest run, [a, b, c, d] in ms (rose/latency_model.py):
        # what it predicted a step would cost, to compare with the SLO's budgets
        "latency_models_ms": {
            role: [round(1000 * c, 4) for c in coef] if (coef := harvest.extra.get(f"{role}_model")) else None
            for role in ("serving", "rollout")
        },
        "pinned": harvest.pinned,
        # the requests over the SLO in each set-up: TTFT or TPOT, and how many would have missed with no rollout
        # time in their life on the serving worker (without_rollout: not the guard's admissions)
        "slo_misses": {mode: misses(run.timings, rose.slo) for mode, run in runs.items()},
    }
    print(
        f"  {row['rollout_traj_s_dedicated']:.2f} -> {row['rollout_traj_s_harvest']:.2f} traj/s "
        f"({row['speedup_harvest']:.2f}x); SLO attainment {row['slo_attainment_alone']:.3f} alone, "
        f"{row['slo_attainment_coserving']:.3f} co-serving; preemptions {row['preemptions']}, pauses {row['pauses']}, "
        f"withdrawals {row['withdrawals']}, "
        f"borrowed share {row['speedup_within_run']:.2f}x within the harvest run; SLO misses "
        + ", ".join(f"{mode} {m['missed']}" for mode, m in row["slo_misses"].items())
        + f" (co-serving: {row['slo_misses']['harvest']['ttft']} on TTFT, {row['slo_misses']['harvest']['tpot']} on "
        f"TPOT, {row['slo_misses']['harvest']['without_rollout']} even without its rollout time)",
        flush=True,
    )
    return row


def pool_repeats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The default load run several times: the median speed-up with its spread, and the attainment of every
    repeat's requests pooled (one miss in 59 requests is 1.7 points, so a single run cannot resolve the goal's
    0.5-point margin; the pool of several can, and the per-run misses show whether a loss repeats)."""
    requests = sum(row["requests"] for row in rows)
    missed = {
        mode: sum(row["slo_misses"][mode]["missed"] for row in rows) for mode in ("alone", "dedicated", "harvest")
    }
    speedups = [row["speedup_harvest"] for row in rows]
    return {
        "speedup_harvest": float(statistics.median(speedups)),
        "speedup_harvest_spread": [min(speedups), max(speedups)],
        "slo_attainment_alone": 1.0 - missed["alone"] / requests,
        "slo_attainment_coserving": 1.0 - missed["harvest"] / requests,
        # serving while rollouts run on the other core and nothing is lent: what two shared cores cost serving
        # before any guard decision (the floor co-serving is measured against, beside serving alone)
        "slo_attainment_dedicated_setup": 1.0 - missed["dedicated"] / requests,
        "requests": requests,
        "runs": [
            {
                "speedup_harvest": row["speedup_harvest"],
                "misses_alone": row["slo_misses"]["alone"]["missed"],
                "misses_dedicated_setup": row["slo_misses"]["dedicated"]["missed"],
                "misses_coserving": row["slo_misses"]["harvest"]["missed"],
                "misses_coserving_without_rollout": row["slo_misses"]["harvest"]["without_rollout"],
                "requests": row["requests"],
                "guard_actions": row["guard_actions"],
            }
            for row in rows
        ],
    }


def _actions(row: dict[str, Any]) -> int:
    """Pauses, preemptions and withdrawals at one load point: how often the guard acted."""
    return int(sum(row["guard_actions"].values()))


def docs_body(result: dict[str, Any], curve: list[dict[str, Any]]) -> str:
    rows = [
        [
            c["time_scale"],
            c["requests_per_s"],
            c["rollout_traj_s_dedicated"],
            c["rollout_traj_s_harvest"],
            c["speedup_harvest"],
            c["speedup_within_run"],
            c["slo_attainment_alone"],
            c["slo_attainment_coserving"],
            c["ttft_p99_ms_alone"],
            c["ttft_p99_ms_coserving"],
            c["preemptions"],
            c["pauses"],
            c["withdrawals"],
        ]
        for c in curve
    ]
    table = markdown_table(
        [
            "time scale",
            "req/s",
            "traj/s dedicated",
            "traj/s harvest",
            "speed-up",
            "all turns / dedicated turns (harvest run)",
            "SLO alone",
            "SLO co-serving",
            "TTFT p99 alone (ms)",
            "TTFT p99 co-serving (ms)",
            "preemptions",
            "pauses",
            "withdrawals",
        ],
        rows,
    )
    slo = result["slo"]
    pooled = result["repeats"]
    repeats = ""
    if len(pooled["runs"]) > 1:
        runs = pooled["runs"]
        speedups = ", ".join(f"{r['speedup_harvest']:.2f}x" for r in runs)
        alone_misses = ", ".join(str(r["misses_alone"]) for r in runs)
        dedicated_misses = ", ".join(str(r["misses_dedicated_setup"]) for r in runs)
        coserving_misses = ", ".join(str(r["misses_coserving"]) for r in runs)
        repeats = (
            f"The default load, {len(runs)} runs: speed-ups {speedups} (median {pooled['speedup_harvest']:.2f}x); "
            f"serving misses alone {alone_misses}, in the dedicated set-up (nothing lent) {dedicated_misses}, "
            f"co-serving {coserving_misses} of {runs[0]['requests']} requests each; "
            f"attainment pooled over the {pooled['requests']} requests: {pooled['slo_attainment_alone']:.3f} alone, "
            f"{pooled['slo_attainment_dedicated_setup']:.3f} dedicated set-up, "
            f"{pooled['slo_attainment_coserving']:.3f} co-serving.\n\n"
        )
    return (
        f"SLO: TTFT p99 {slo['ttft_p99_ms']:.1f} ms, TPOT p99 {slo['tpot_p99_ms']:.1f} ms ({slo['source']}).\n\n"
        f"{table}\n\n{repeats}Measured in a short `rollarc train configs/harvest.yaml` at its training lr: "
        f"{result['cross_site_bytes_per_step'] / 1e6:.2f} MB per step crossed into the borrowed site "
        f"({result['in_site_bytes_per_step'] / 1e6:.2f} MB inside it; one fp32 copy is "
        f"{result['full_copy_bytes'] / 1e6:.2f} MB). Modelled cross-site bytes per version, one sparse delta "
        f"at lr 1e-6 vs full copies: {result['cross_site_bytes_ratio_modelled']:.4f}. Each speed-up compares set-ups of "
        "one run; absolute throughputs move between sittings of this machine. See docs/rose.md.\n"
    )


def sweep(
    policy: Policy,
    rose: RoseConfig,
    trace: list[TraceRequest],
    scales: list[float],
    extend: bool,
    repeats: int = 1,
) -> tuple[SLOConfig, dict[float, dict[str, Any]], list[dict[str, Any]]]:
    """The derived SLO, the three set-ups at each time scale (``extend``: heavier loads until the guard acts), and
    the default load's further ``repeats - 1`` runs. The default load's ``repeats`` serving-alone runs go first:
    the SLO is derived from all of them, and each repeat is scored with its own."""
    base = rose.replay.time_scale
    for s in scales:  # an empty window fails now, not after the load points before it have run
        load_window(rose, trace, s)
    alone = [run_alone(policy, rose, load_window(rose, trace, base), base) for _ in range(repeats)]
    slo = derived_slo(rose, alone)
    rose = rose.model_copy(update={"slo": slo})
    print(f"SLO: TTFT p99 {slo.ttft_p99_ms:.1f} ms, TPOT p99 {slo.tpot_p99_ms:.1f} ms", flush=True)
    loads = {s: one_load(policy, rose, trace, s, alone[0] if s == base else None) for s in scales}
    heaviest = max(loads)
    while extend and _actions(loads[heaviest]) == 0 and heaviest < 16 * base:
        heaviest *= 2  # the guard has not acted yet: heavier serving load until it must
        loads[heaviest] = one_load(policy, rose, trace, heaviest)
    main_scale = loads.get(base, loads[min(loads)])["time_scale"]
    again = [one_load(policy, rose, trace, main_scale, run if main_scale == base else None) for run in alone[1:]]
    return slo, loads, again


def build_parser() -> argparse.ArgumentParser:
    """The common flags (harness) and the ROSE settings, trace and load points."""
    parser = bench_parser(
        "bench rose",
        __doc__,
        quick="one load point, 8 s of trace (a few minutes); no sweep to the guard",
        config_help="YAML with the ROSE settings (slo:, serving:, replay:, ...)",
        publish_as="rose",
        publish_help="name of the published block and JSON (overrides change what is measured: e.g. another window "
        "of the trace, replay.offset_s=1800 --publish-as rose_window1800)",
    )
    add = parser.add_argument
    add(
        "--train",
        action="store_true",
        help="time `rollarc train` on configs/harvest.yaml with and without harvest: instead "
        "(rollarc bench rose --train --help; docs/rose.md#timed-inside-rollarc-train)",
    )
    add("--trace", default=None, help="trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens); default: a synthetic trace")
    add(
        "--time-scales",
        default=None,
        help="comma-separated trace time scales for the curve "
        "(default: replay.time_scale; full runs add half and twice it, then heavier points until the guard acts)",
    )
    add(
        "--repeats",
        type=int,
        default=1,
        help="run the default load this many times in all (each repeat: serving alone, dedicated, harvest, at the "
        "one SLO derived from all the alone runs, which go first); the headline is then the median speed-up and "
        "the attainment pooled over the repeats",
    )
    add_overrides(parser, help_text="dotted key=value overrides, e.g. slo.ttft_p99_ms=1500")
    return parser


def main(argv: list[str]) -> int:
    if "--train" in argv:  # the training-path benchmark: `rollarc train` with and without harvest: (its own flags)
        from rollarc.bench.rose_train import main as train_main  # deferred: the training runtime (torch, Ray)

        return train_main([arg for arg in argv if arg != "--train"])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    refuse_unnamed_overrides(parser, args, "rose")
    rose = load_config(RoseConfig, Path(args.config) if args.config else None, args.overrides)
    if args.quick:
        rose = rose.model_copy(update={"replay": rose.replay.model_copy(update={"duration_s": 8.0})})
    base = rose.replay.time_scale
    full_scales = [base] if args.quick else [base / 2, base, base * 2]
    scales = [float(s) for s in args.time_scales.split(",")] if args.time_scales else full_scales
    trace = load_trace(args.trace, seed=0)
    with tempfile.TemporaryDirectory(prefix="rollarc-bench-rose-") as scratch, rose_cluster():
        policy = Policy(*write_policy(PolicySpec(), Path(scratch)))
        slo, loads, again = sweep(
            policy, rose, trace, scales, extend=not args.quick and not args.time_scales, repeats=args.repeats
        )
    main_point = loads.get(base, loads[min(loads)])
    curve = [loads[s] for s in sorted(loads)]
    result = headline(main_point, again, curve, args.quick)
    result.update(
        slo={
            "ttft_p99_ms": slo.ttft_p99_ms,
            "tpot_p99_ms": slo.tpot_p99_ms,
            "source": f"{rose.slo_alone_factor:g} x serving-alone p99 at time scale {base:g}"
            + (f", pooled over {args.repeats} runs" if args.repeats > 1 else "")
            if rose.slo_alone_factor
            else "slo: as configured",
        },
        trace=Path(args.trace).name if args.trace else "synthetic",
        settings=defaults_record(rose, PolicySpec()),  # those shared with training's configs/harvest.yaml
        loads=[{k: v for k, v in c.items() if k != "pinned"} for c in curve],
        pinned=main_point["pinned"],
    )
    # the trace, the config and the overrides measured
    return finish(args.publish_as, docs_body(result, curve), result, command("rose", argv), args)


HEADLINE_KEYS = (
    "rollout_traj_s_dedicated",
    "rollout_traj_s_harvest",
    "ttft_p99_ms_alone",
    "ttft_p99_ms_coserving",
    "preemptions",
    "guard_actions",
    "rollout_tokens_s_dedicated",
    "rollout_tokens_s_harvest",
)


def headline(
    main_point: dict[str, Any], again: list[dict[str, Any]], curve: list[dict[str, Any]], quick: bool
) -> dict[str, Any]:
    """The default load's figures, pooled over the repeats, the bytes a borrowed worker's sync crosses sites
    with, and whether the goal (speed-up >= 1.3 at the alone attainment, the guard acting) was met."""
    result = {key: main_point[key] for key in HEADLINE_KEYS}
    pooled = pool_repeats([main_point, *again])
    # over the repeats (one run: that run's own figures): the median speed-up, the attainment pooled
    result.update({key: pooled[key] for key in ("speedup_harvest", "slo_attainment_alone", "slo_attainment_coserving")})
    result["repeats"] = pooled
    result["time_scale"] = main_point["time_scale"]  # the default load's, whose point in ``loads`` is the first repeat
    result["repeat_loads"] = [{k: v for k, v in row.items() if k != "pinned"} for row in again]  # every figure
    guard_binds = _actions(curve[-1]) > 0
    ratio, delta, full, hops = cross_site_bytes_ratio(1, quick)
    measured = measured_cross_site_bytes(quick)  # a short `rollarc train configs/harvest.yaml` at train.lr
    result["cross_site_bytes_ratio_modelled"] = ratio
    result["cross_site_bytes_per_step"] = measured["cross_site_bytes_per_step"]
    result["in_site_bytes_per_step"] = measured["in_site_bytes_per_step"]
    result["full_copy_bytes"] = measured["full_copy_bytes"]
    result.update(
        guard_binds=guard_binds,
        goal_met=bool(
            pooled["speedup_harvest"] >= 1.3
            and pooled["slo_attainment_coserving"] >= pooled["slo_attainment_alone"] - 0.005
            and guard_binds
        ),
        delta_bytes_per_version=delta,
        full_bytes_per_version=full,
        bytes_per_hop=hops,
    )
    return result
