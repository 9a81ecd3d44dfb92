"""``rollarc bench step``: per-step overhead on short single-turn work, against a plain in-process GRPO loop.

The workload (``configs/short_task.yaml``): reverse a 4–8-letter word in one reply of at most 12 tokens,
64 completions per step (8 prompts × 8), the 1.6 M-parameter ``tiny`` policy, one torch thread per role.
Every mode starts from the same SFT warm start and trains the same number of steps:

- ``sync``: rollarc on Ray, synchronous (k = 0 with the barrier): all 64 completions, train, sync.
- ``async_k1``: rollarc on Ray, rollout never stops, every trained token at most one version old.
- ``inprocess``: :mod:`rollarc.train.generate_loop`, one process, no Ray: HF ``generate`` samples all 64
  completions in one left-padded call on the policy being trained, then the same ``PolicyTrainer`` step
  (same loss from ``algo/``, same AdamW); no weight sync is needed.

Reported: completions/s per mode in the steady state (completions trained in steps 2..N ÷ the time from the
end of step 1 to the end of step N: step 1 carries one-off warm-up; Ray start-up, SFT and held-out
evaluations are outside it too), the ratios of the two rollarc modes to ``inprocess``, the median
seconds per step of each phase (``phase_s``: for rollarc ``rollout_s`` = step − train − sync, ``train_s`` and
``sync_s`` from ``metrics.jsonl``; for the in-process loop its own five phases), and held-out success after
training (greedy episodes on seeds disjoint from training, the same for every mode). The goal of issue 15:
``ratio_async_vs_inprocess >= 1.5`` and ``ratio_sync_vs_inprocess >= 1.0``.

``--seeds N`` (default 3) repeats everything at seeds 0..N-1, each with its own SFT warm start; the
top-level figures are medians over seeds, ``*_seeds`` keys carry the per-seed values and their range,
and ``per_seed`` every seed's modes.

``phase_split`` explains ``ratio_sync_vs_inprocess`` by phase (:mod:`rollarc.bench.step_split`): for the in-process
loop and for synchronous rollarc, mean seconds per steady step of the same seven phases (start, generate, score,
to_train, train, publish, sync; rollarc's from the chain of links in its ``timeline.jsonl``,
:mod:`rollarc.bench.step_timeline`), averaged over seeds, with ``sync_minus_inprocess`` per phase (the differences
add up to the step's difference) and ``ratio_from_steps``, the ratio those mean steps give.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from statistics import fmean, median
from typing import Any

from rollarc.agent.local_eval import evaluate_local
from rollarc.bench.async_runs import run_mode
from rollarc.bench.harness import RUNS_HELP, add_overrides, bench_parser, finish, runs_folder
from rollarc.bench.report_file import markdown_table
from rollarc.bench.seed_stats import seed_stats
from rollarc.bench.step_split import inprocess_split, phase_split, sync_split
from rollarc.bench.step_timeline import read_spans, step_links
from rollarc.config import Config, load_train_config
from rollarc.config.plugin_path import plugin_pythonpath
from rollarc.engine.config import EngineConfig
from rollarc.models.checkpoint import load_tokenizer
from rollarc.runtime.entry import initial_policy
from rollarc.train.generate_loop import run_generate_loop

QUICK = [
    "sft.checkpoint=artifacts/sft/bench-step-quick",
    "sft.steps=40",
    "sft.episodes=400",
    "train.steps=3",
    "train.eval_episodes=32",
]

MODES = {
    "sync": ["async.mode=sync", "async.max_staleness=0"],
    "async_k1": ["async.mode=async", "async.max_staleness=1"],
}


def steady_rate(step_ends: list[float], per_step: int) -> float:
    """Completions per second from the end of step 1 to the end of the last step.

    Step 1 carries each mode's one-off warm-up (Ray's first calls, the allocator, the first optimiser step),
    which would otherwise dominate a short run; with a single step, there is nothing else to measure.
    """
    if len(step_ends) < 2:
        return per_step / step_ends[0] if step_ends and step_ends[0] > 0 else float("nan")
    return (len(step_ends) - 1) * per_step / max(step_ends[-1] - step_ends[0], 1e-9)


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "step_time_s" in r]


def rollarc_phases(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Median seconds per step of a rollarc run's phases, from its ``metrics.jsonl`` rows."""
    if not steps:
        return {}
    return {
        "step_s": median(r["step_time_s"] for r in steps),
        "rollout_s": median(max(0.0, r["step_time_s"] - r["train_sync_s"]) for r in steps),
        "train_s": median(r["train_s"] for r in steps),
        "sync_s": median(r["sync_s"] for r in steps),
    }


def run_inprocess(cfg: Config, policy: str, threads: int) -> dict[str, Any]:
    """The HF-``generate`` loop, then the same held-out evaluation as the runtime's (greedy, same seeds)."""
    result = run_generate_loop(cfg, policy, threads=threads)
    assert result.model is not None
    heldout = evaluate_local(
        result.model.eval(),
        load_tokenizer(policy),
        list(cfg.tasks),
        cfg.train.eval_episodes,
        cfg.train.eval_seed_base,
        cfg.sampling,
        EngineConfig(num_threads=threads, max_num_seqs=cfg.engine.max_num_seqs),
        temperature=cfg.train.eval_temperature,
    )
    ends = list(itertools.accumulate(s["step_time_s"] for s in result.steps))
    return {
        "wall_s": result.wall_s,
        "completions_per_s": steady_rate(ends, cfg.train.groups_per_step * cfg.train.group_size),
        "success": heldout["success"],
        "phase_s": {"step_s": median(s["step_time_s"] for s in result.steps), **result.phase_s},
        "phase_split": inprocess_split(result.steps),
    }


def run_seed(args: argparse.Namespace, wanted: list[str], seed: int) -> tuple[dict[str, dict[str, Any]], Config]:
    """Every mode at one seed, from that seed's own SFT warm start (trained before any timing)."""
    overrides = [*(QUICK if args.quick else []), *args.overrides, f"seed={seed}"]
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    overrides.append("train.eval_every=0")
    base = load_train_config(args.config, overrides)
    plugin_pythonpath(base.plugin_paths)
    runs = runs_folder(args.runs, "step")
    if args.seeds > 1:
        overrides.append(f"sft.checkpoint={runs / f'sft-seed{seed}'}")
        base = load_train_config(args.config, overrides)
    policy, _ = initial_policy(base)
    overrides.append(f"model.path={policy}")
    base = load_train_config(args.config, overrides)
    threads = base.cluster.roles.rollout[0].threads
    per_step = base.train.groups_per_step * base.train.group_size
    results: dict[str, dict[str, Any]] = {}
    for label in wanted:
        print(f"== seed {seed}: {label}", flush=True)
        if label == "inprocess":
            r = run_inprocess(base, policy, threads)
            results[label] = {
                "completions_per_s": r["completions_per_s"],
                "wall_s": r["wall_s"],
                "success": r["success"],
                "phase_s": r["phase_s"],
                "phase_split": r["phase_split"],
            }
        else:
            r = run_mode(args.config, [*overrides, *MODES[label]], f"{label}-seed{seed}", runs)
            steps = read_steps(Path(r["run_dir"]))
            results[label] = {
                "completions_per_s": steady_rate([row["wall_s"] for row in steps], per_step),
                "wall_s": r["rl_wall_s"],
                "success": r["success"],
                "phase_s": rollarc_phases(steps),
            }
            if label == "sync":  # the chain of links from one swap to the next (step_timeline), on the same split
                results[label]["phase_split"] = sync_split(step_links(read_spans(Path(r["run_dir"]))))
        r = results[label]
        print(f"   {r['completions_per_s']:.1f} completions/s, success {r['success']:.3f}, {r['phase_s']}", flush=True)
    return results, base


def seed_ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """One seed's rollarc modes against its in-process loop (``None`` where a mode did not run)."""
    ref = results.get("inprocess", {}).get("completions_per_s")
    return {
        f"ratio_{mode}_vs_inprocess": results[key]["completions_per_s"] / ref if ref and key in results else None
        for mode, key in (("sync", "sync"), ("async", "async_k1"))
    }


def aggregate(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over seeds (with per-seed values and spread) of the ratios and of each mode's rate."""
    out: dict[str, Any] = {}
    for key in ("ratio_sync_vs_inprocess", "ratio_async_vs_inprocess"):
        stats = seed_stats([s[key] for s in per_seed])
        out[key] = stats["median"]
        out[f"{key}_seeds"] = stats
    modes = per_seed[0]["modes"]
    out["completions_per_s"] = {
        m: seed_stats([s["modes"][m]["completions_per_s"] for s in per_seed])["median"] for m in modes
    }
    out["success"] = {m: seed_stats([s["modes"][m]["success"] for s in per_seed])["median"] for m in modes}
    out["phase_s"] = {
        m: {k: median(s["modes"][m]["phase_s"][k] for s in per_seed) for k in modes[m]["phase_s"]} for m in modes
    }
    out["phase_split"] = seeds_split(per_seed)
    return out


def seeds_split(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """The phase split (step_split.py) averaged over seeds, so each mode's phases still add up to its step, and
    ``ratio_from_steps``: the in-process mean step over the synchronous one, the ratio the split accounts for."""
    splits = {
        mode: [s["modes"][mode]["phase_split"] for s in per_seed if s["modes"].get(mode, {}).get("phase_split")]
        for mode in ("inprocess", "sync")
    }
    if not all(splits.values()) or any(len(v) != len(per_seed) for v in splits.values()):
        return {}
    mean = {mode: {k: fmean(run[k] for run in runs) for k in runs[0]} for mode, runs in splits.items()}
    out: dict[str, Any] = phase_split(mean["inprocess"], mean["sync"])
    out["ratio_from_steps"] = mean["inprocess"]["step_s"] / mean["sync"]["step_s"]
    return out


def main(argv: list[str]) -> int:
    parser = bench_parser(
        "bench step",
        __doc__,
        quick="a smoke run: 3 steps, a short warm start, 32 eval episodes",
        config="configs/short_task.yaml",
        runs=RUNS_HELP,
    )
    parser.add_argument("--steps", type=int, default=None, help="training steps per mode (default: the config's)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1, each with its own warm start (quick: 1)")
    parser.add_argument("--modes", default="inprocess,sync,async_k1", help="which modes to run, comma-separated")
    add_overrides(parser, "every mode")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = 1
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    wanted = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(wanted) - {"inprocess", *MODES})
    if unknown:
        parser.error(f"--modes: unknown {unknown}; choose from inprocess, {', '.join(MODES)}")
    per_seed: list[dict[str, Any]] = []
    for seed in range(args.seeds):
        results, base = run_seed(args, wanted, seed)
        per_seed.append({"seed": seed, **seed_ratios(results), "modes": results})
    threads = base.cluster.roles.rollout[0].threads
    per_step = base.train.groups_per_step * base.train.group_size
    result = {
        **aggregate(per_seed),
        "seeds": args.seeds,
        "steps": base.train.steps,
        "completions_per_step": per_step,
        "threads": threads,
        "goal": {"ratio_async_vs_inprocess": 1.5, "ratio_sync_vs_inprocess": 1.0},
        "per_seed": per_seed,
    }
    return finish("step", render(result), result, "rollarc bench step", args)


def render(result: dict[str, Any]) -> str:
    """The docs block: one row per seed and mode, then the medians."""
    rows = []
    for s in result["per_seed"]:
        ref = s["modes"].get("inprocess", {}).get("completions_per_s")
        for label, r in s["modes"].items():
            rows.append(
                [
                    s["seed"],
                    label,
                    r["completions_per_s"],
                    r["completions_per_s"] / ref if ref else float("nan"),
                    r["wall_s"],
                    r["success"],
                ]
            )
    body = markdown_table(["seed", "mode", "completions/s", "vs in-process", "wall s", "held-out success"], rows)
    sync, asyn = result["ratio_sync_vs_inprocess_seeds"], result["ratio_async_vs_inprocess_seeds"]

    def line(stats: dict[str, Any]) -> str:
        if stats["median"] is None:
            return "not run"
        return f"median {stats['median']:.3f} (range {stats['min']:.3f} to {stats['max']:.3f})"

    body += (
        f"\n\n{result['seeds']} seeds, {result['steps']} steps of {result['completions_per_step']} completions per mode, "
        f"{result['threads']} torch thread per role. Sync vs in-process: {line(sync)}; async (k = 1) vs in-process: "
        f"{line(asyn)}. Goals: 1.0 and 1.5. Phases (median s per step, median over seeds): "
        + "; ".join(
            f"{label} " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
            for label, phases in result["phase_s"].items()
        )
        + "."
    )
    split = result.get("phase_split", {}).get("sync_minus_inprocess")
    if split:
        body += (
            " Where sync differs from in-process (mean s per step, sync − in-process; the differences add up to the "
            "step's): " + ", ".join(f"{k} {v:+.4f}" for k, v in split.items()) + "."
        )
    return body
