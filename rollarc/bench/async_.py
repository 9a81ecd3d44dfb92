"""``rollarc bench async``: trajectory-level asynchrony against synchronous and monolithic training.

Every mode runs the same workload (``configs/longtail.yaml`` by default: FrozenLake turns behind
heavy-tailed env latency) from the same SFT checkpoint, for the same number of training steps, on the
same pools:

- ``sync``: disaggregated (rollout and trainer each hold one unit of the compute pool), k = 0 with the
  barrier: all B×G trajectories, then train, then sync.
- ``async k``: the same placement; rollout never stops; each trained token is at most k versions old.
- ``monolithic``: rollout and trainer share the whole compute pool and alternate (each phase gets
  every thread of the pool), k = 0: the colocated synchronous design of most RL frameworks.

Reported per mode: RL wall time (first admitted group to last weight sync; SFT, Ray start-up and the
held-out evaluations are outside it), trajectories/s, the bubble fraction of each role, and held-out
success after training (200 greedy episodes on seeds disjoint from training).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from rollarc.bench.report_file import add_docs_flag, emit_json, markdown_table, publish
from rollarc.config import load_train_config
from rollarc.report.run_dir import read_summary
from rollarc.runtime.entry import initial_policy, run_training

QUICK = [
    "model.preset=nano",
    "sft.checkpoint=artifacts/sft/bench-async-quick",
    "sft.steps=5",
    "sft.episodes=50",
    "train.steps=2",
    "train.groups_per_step=2",
    "train.group_size=4",
    "train.eval_episodes=8",
    "tasks.0.latency.median_s=0.02",
    "tasks.0.env.kwargs.size=4",
    "tasks.0.agent.max_turns=8",
]


def modes(steps_k: list[int]) -> list[tuple[str, list[str]]]:
    """(label, overrides) per mode, in the order they run."""
    out = [("sync", ["async.mode=sync", "async.max_staleness=0"])]
    out += [(f"async_k{k}", ["async.mode=async", f"async.max_staleness={k}"]) for k in steps_k]
    out.append(
        (
            "monolithic",
            [
                "async.mode=sync",
                "async.max_staleness=0",
                "cluster.roles.train.threads=2",
                "cluster.roles.rollout.threads=2",
            ],
        )
    )
    return out


def run_mode(config_path: str, overrides: list[str], label: str, runs: Path) -> dict[str, Any]:
    cfg = load_train_config(config_path, [*overrides, f"name={label}", f"run.dir={runs}", "run.progress=false"])
    code = run_training(cfg)
    if code != 0:
        raise RuntimeError(f"mode {label} failed with exit code {code}")
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir() and p.name.startswith(label)]
    summary = read_summary(run_dir)
    return {
        "rl_wall_s": summary.rl_wall_s,
        "trajectories_per_s": summary.trajectories_per_s,
        "success": summary.heldout_success_after_rl,
        "success_before": summary.heldout_success_before_rl,
        "bubble": summary.bubble_fraction or {},
        "dropped_stale_groups": summary.dropped_stale_groups,
        "failed_trajectories": summary.failed_trajectories,
        "run_dir": str(run_dir),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc bench async", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/longtail.yaml")
    parser.add_argument("--steps", type=int, default=None, help="training steps per mode (default: the config's)")
    parser.add_argument("--ks", default="1,2,4", help="staleness bounds of the async modes")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run (nano model, 2 steps)")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    add_docs_flag(parser)
    parser.add_argument("--runs", default=None, help="where the runs go (default: a temporary directory)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every mode")
    args = parser.parse_args(argv)
    overrides = [*(QUICK if args.quick else []), *args.overrides]
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    ks = [int(k) for k in args.ks.split(",") if k]
    base = load_train_config(args.config, overrides)
    policy, _ = initial_policy(base)  # train the shared SFT warm start once, before any timing
    overrides.append(f"model.path={policy}")
    base = load_train_config(args.config, overrides)
    runs = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="rollarc-bench-async-"))
    results: dict[str, dict[str, Any]] = {}
    for label, mode_overrides in modes(ks):
        print(f"== {label}", flush=True)
        results[label] = run_mode(args.config, [*overrides, *mode_overrides], label, runs)
        r = results[label]
        print(
            f"   {r['rl_wall_s']:.1f} s, {r['trajectories_per_s']:.2f} traj/s, success {r['success']:.3f}, "
            f"bubbles {json.dumps({k: round(v, 2) for k, v in r['bubble'].items()})}",
            flush=True,
        )
    sync_s = results["sync"]["rl_wall_s"]
    result = {
        "sync_s": sync_s,
        "async_s": {str(k): results[f"async_k{k}"]["rl_wall_s"] for k in ks},
        "monolithic_s": results["monolithic"]["rl_wall_s"],
        **{f"speedup_k{k}": sync_s / results[f"async_k{k}"]["rl_wall_s"] for k in ks},
        "speedup_k2_vs_monolithic": (
            results["monolithic"]["rl_wall_s"] / results["async_k2"]["rl_wall_s"] if "async_k2" in results else None
        ),
        "success": {label: r["success"] for label, r in results.items()},
        "success_before_rl": results["sync"]["success_before"],
        "steps": base.train.steps,
        "trajectories_per_step": base.train.groups_per_step * base.train.group_size,
    }
    rows = [
        [
            label,
            r["rl_wall_s"],
            sync_s / r["rl_wall_s"],
            r["trajectories_per_s"],
            r["bubble"].get("rollout", float("nan")),
            r["bubble"].get("train", float("nan")),
            r["dropped_stale_groups"],
            r["success"],
        ]
        for label, r in results.items()
    ]
    body = markdown_table(
        [
            "mode",
            "RL wall s",
            "speed-up vs sync",
            "trajectories/s",
            "rollout bubble",
            "train bubble",
            "stale groups dropped",
            "held-out success",
        ],
        rows,
    )
    body += (
        f"\n\n{base.train.steps} steps of {result['trajectories_per_step']} trajectories per mode; "
        f"held-out success before RL {result['success_before_rl']:.3f} (200 greedy episodes)."
    )
    publish("async", body, result, "rollarc bench async", quick=args.quick, no_docs=args.no_docs)
    emit_json(result)
    return 0
