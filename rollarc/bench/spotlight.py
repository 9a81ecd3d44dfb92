"""``rollarc bench spotlight``: Flow-GRPO with random seeds vs stale-weight seed exploration (± the bandit).

Every mode trains from the same pretrained base with the same trainer and sampler resources, for the same
number of steps, with ``--seeds`` RL seeds (the seed fixes the prompt schedule and the candidate noise
seeds):

- ``baseline``: each group is ``G`` random noise seeds;
- ``explore``: an explorer on the ``spot`` pool scores ``explore.candidates`` seeds per prompt on weights
  one version behind, and the trainer samples the ``G`` most contrastive with the current weights;
- ``bandit``: the same candidate budget, split over the step's prompts by the UCB planner.

Reported: the target (the lowest of the baseline seeds' best held-out rewards, so every baseline seed
reaches it), each run's RL wall time and steps to reach it (``null`` if it never does), the speed-ups
(mean baseline time over mean mode time, over the seeds that reached it), the cost to target (trainer
and sampler on on-demand capacity, the explorer on spot capacity, priced from
``configs/cluster/hardware.yaml`` as ``--price-kind`` devices), and Kendall τ between per-seed rewards
of the same prompts and seeds under versions ``v`` and ``v + s`` (s = 1, 2, 4) of the baseline's first
seed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rollarc.bench.report_file import add_docs_flag, emit_json, markdown_table, publish
from rollarc.cluster.catalogue import load_catalogue
from rollarc.diffusion.config import T2IConfig, load_t2i_config
from rollarc.diffusion.entry import CACHE, run_t2i
from rollarc.diffusion.model import load_policy
from rollarc.diffusion.pretrain import load_or_pretrain
from rollarc.diffusion.sampling import sample_sde
from rollarc.diffusion.tasks.base import split
from rollarc.diffusion.tasks.registry import make_task
from rollarc.diffusion.workers import reward_table, score
from rollarc.placement import CATALOGUE
from rollarc.spotlight.kendall import kendall_tau

MODES = {
    "baseline": ["explore.enabled=false"],
    "explore": ["explore.enabled=true", "explore.bandit=false"],
    "bandit": ["explore.enabled=true", "explore.bandit=true"],
}
QUICK = [
    "train.steps=12",
    "train.prompts_per_step=4",
    "train.group_size=4",
    "explore.candidates=12",
    "train.eval_every=2",
    "train.eval_prompts=12",
    "train.eval_seeds=1",
]
STALENESS = (1, 2, 4)


def run_mode(config: str, overrides: list[str], label: str, seed: int, runs: Path) -> dict[str, Any]:
    cfg = load_t2i_config(
        config,
        [
            *overrides,
            *MODES[label],
            f"seed={seed}",
            f"name={label}-s{seed}",
            f"run.dir={runs}",
            "run.progress=false",
            "run.tensorboard=false",
            "run.checkpoint_every=1",
        ],
    )
    if run_t2i(cfg) != 0:
        raise RuntimeError(f"mode {label} seed {seed} failed")
    (run_dir,) = [p for p in runs.iterdir() if p.name.startswith(f"{label}-s{seed}-")]
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["run_dir"] = str(run_dir)
    return summary


def first_reach(evals: list[dict[str, Any]], target: float) -> tuple[float | None, int | None]:
    """RL wall time and step of the first evaluation at or above ``target`` (step 0 excluded)."""
    for e in evals:
        if e["step"] > 0 and e["reward"] >= target:
            return float(e["rl_wall_s"]), int(e["step"])
    return None, None


def mean_or_none(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.fmean(got) if got else None


def kendall_by_staleness(cfg: T2IConfig, run_dir: Path, prompts: int = 8, seeds: int = 12) -> dict[str, float | None]:
    """Mean τ between per-seed rewards under versions v and v + s, over the run's checkpoints and prompts."""
    torch.set_num_threads(cfg.model.threads)
    tasks = [make_task(n, CACHE) for n in cfg.tasks]
    table = reward_table(tasks)
    train = [p for t in tasks for p in split(t.prompts())[0]][:prompts]
    flat_p = [p for p in train for _ in range(seeds)]
    flat_s = [1000 + k for _ in train for k in range(seeds)]
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*"))
    rewards = {}
    for ck in checkpoints:
        traj = sample_sde(
            load_policy(ck / "policy").eval(), flat_p, flat_s, cfg.train.sample_steps, cfg.train.noise_level, 0
        )
        rewards[int(ck.name.split("_")[1])] = np.array(score(table, flat_p, traj.images())).reshape(len(train), seeds)
    out: dict[str, float | None] = {}
    for s in STALENESS:
        taus = [
            t
            for v in rewards
            if v + s in rewards
            for a, b in zip(rewards[v], rewards[v + s], strict=True)
            if (t := kendall_tau(a.tolist(), b.tolist())) is not None
        ]
        out[str(s)] = statistics.fmean(taus) if taus else None
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rollarc bench spotlight", description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/t2i_quickstart.yaml")
    parser.add_argument("--seeds", type=int, default=2, help="RL seeds per mode (at least 2)")
    parser.add_argument("--quick", action="store_true", help="a short run: 12 steps of 4 groups of 4")
    parser.add_argument("--price-kind", default="h800", help="catalogue device that prices every pool unit")
    parser.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    add_docs_flag(parser)
    parser.add_argument("--runs", default=None, help="where the runs go (default: a temporary directory)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every mode")
    args = parser.parse_args(argv)
    overrides = [*(QUICK if args.quick else []), *args.overrides]
    base_cfg = load_t2i_config(args.config, overrides)
    tasks = [make_task(n, CACHE) for n in base_cfg.tasks]
    base = load_or_pretrain(base_cfg, tasks)  # the shared base is built before any timing
    overrides.append(f"model.path={base}")
    runs = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="rollarc-bench-spotlight-"))
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for seed in range(args.seeds):
        for label in MODES:
            print(f"== {label} seed {seed}", flush=True)
            results[label].append(run_mode(args.config, overrides, label, seed, runs))
    target = min(max(e["reward"] for e in r["evals"] if e["step"] > 0) for r in results["baseline"])
    reach = {m: [first_reach(r["evals"], target) for r in rs] for m, rs in results.items()}
    time_to_target = {m: [t for t, _ in v] for m, v in reach.items()}
    steps_to_target = {m: [s for _, s in v] for m, v in reach.items()}
    mean_t = {m: mean_or_none(v) for m, v in time_to_target.items()}

    def speedup(mode: str) -> float | None:
        b, x = mean_t["baseline"], mean_t[mode]
        return b / x if b is not None and x else None

    cat = load_catalogue(CATALOGUE)
    on_demand, spot = cat.price_per_hour(args.price_kind), cat.price_per_hour(args.price_kind, spot=True)
    roles = base_cfg.cluster.roles

    def cost(mode: str) -> float | None:
        t = mean_t[mode]
        if t is None:
            return None
        units = (roles.trainer.units + roles.sampler.units) * on_demand
        if mode != "baseline":
            units += roles.explorer.units * spot
        return t / 3600 * units

    costs = {m: cost(m) for m in MODES}
    b_cost = costs["baseline"]
    cost_ratio = {m: (b_cost / c if b_cost and c else None) for m, c in costs.items() if m != "baseline"}
    tau = kendall_by_staleness(load_t2i_config(args.config, overrides), Path(results["baseline"][0]["run_dir"]))
    explored = {
        m: statistics.fmean(r["explored_images"] / max(r["sampled_images"], 1) for r in rs) for m, rs in results.items()
    }
    result = {
        "target_heldout_reward": target,
        "time_to_target_s": time_to_target,
        "steps_to_target": steps_to_target,
        "speedup_explore": speedup("explore"),
        "speedup_bandit": speedup("bandit"),
        "cost_to_target_usd": costs,
        "cost_ratio": cost_ratio,
        "kendall_tau": tau,
        "explored_per_trained_image": explored,
        "final_heldout_reward": {m: [r["heldout_reward_after_rl"] for r in rs] for m, rs in results.items()},
        "seeds": args.seeds,
        "steps": base_cfg.train.steps,
        "price_kind": args.price_kind,
    }
    rows = [
        [
            m,
            json.dumps(time_to_target[m]),
            json.dumps(steps_to_target[m]),
            speedup(m) if m != "baseline" else 1.0,
            costs[m] if costs[m] is not None else "n/a",
            explored[m],
        ]
        for m in MODES
    ]
    body = markdown_table(
        [
            "mode",
            "RL s to target (per seed)",
            "steps to target",
            "speed-up",
            "cost to target USD",
            "explored / trained images",
        ],
        rows,
    )
    body += f"\n\nTarget held-out reward {target:.3f}; Kendall τ by staleness {json.dumps(tau)}."
    publish("spotlight", body, result, "rollarc bench spotlight", quick=args.quick, no_docs=args.no_docs)
    emit_json(result)
    return 0
