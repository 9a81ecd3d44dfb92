"""``rollarc bench chaos``: train through env failures, hangs and the loss of one worker of every role.

Per seed (``--seeds``, default 2), two runs of the same config and seed (``configs/quickstart.yaml`` by
default, shortened), from one SFT warm start (``--quick``, a smoke run of the chaos path: the chaos run alone,
its clean side null; ``compare`` is tested on given runs in tests/unit/test_bench_chaos_aggregate.py):

- ``clean``: no injected fault (the config's own env latency, if any, is kept);
- ``chaos``: every env step first waits, instead of the config's own delay, a heavy-tailed delay resampled
  from a trace (lognormal, median 10 ms, sigma 1.5, plus 0.2 % hangs of 10,000 s that only the trajectory
  timeout ends) and fails with probability 2 %; and during training one actor of each role in turn is killed with
  ``ray.kill(handle, no_restart=False)``, which is what a crashed process or a lost node looks like to Ray:
  an EnvWorker, a rollout replica, the router, then the trainer. The reward role is absent: the task's
  reward is a rule computed in the EnvWorker (a model-based judge runs as a Ray Serve deployment, which
  Serve itself restarts).

Both runs retry a failed env step twice (``SHARED``), as a user facing transient sandbox errors would, so
that those failures do not drop the long episodes (docs/failures.md#transient-step-failures-and-the-bias-
they-cause); with no fault injected the retries never fire, so the clean run is the plain config. A hang
is ended by the 10-s trajectory timeout. ``async.redundancy`` is left off: the figures were measured
without it, and its former only rule (now ``redundancy_keep: first_finished``) keeps the first ``G`` of
``G + r`` rollouts to finish, which on a task whose successes are its longest episodes trains against
success (docs/failures.md#redundant-rollouts-favour-short-episodes).

Reported: ``crashed`` (a chaos run did not finish), ``steps_lost`` (steps redone after trainer losses),
``trajectories_failed``, ``trajectories_lost`` (started, and neither done, dropped, failed, cancelled nor
retried: see ``rollarc/runtime/trajectory_accounting.py``), the restarts per role, and held-out success of
every run's final policy, evaluated after the runs on the clean envs (``evaluate_local``), so that the
injected env failures do not count against the chaos policy. ``success_gap`` is the mean over seeds of
chaos minus clean; ``noise_2se`` is two standard errors of that difference: the larger of the held-out
evaluation's binomial error and the spread between seeds (Welch's, from the per-seed successes), since a
training run's outcome varies with its seed far more than one evaluation does.

``--path harvest`` and ``--path spot`` (or a ``--config`` on those paths) run the harvest and spot paths' own
kill-every-role run instead: ``rollarc.bench.chaos_path``.
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayError

from rollarc.agent.local_eval import evaluate_local
from rollarc.bench.harness import RUNS_HELP, add_overrides, bench_parser, finish, runs_folder, seed_count
from rollarc.bench.report_file import markdown_table
from rollarc.config import Config, load_train_config
from rollarc.models.checkpoint import load_policy
from rollarc.runtime.entry import initial_policy, run_training
from rollarc.runtime.stop_signals import RunStopped

ROLES = ("env", "rollout", "router", "train")  # killed in this order
PATHS = ("llm", "harvest", "spot")  # --path
ACTOR_PREFIX = {"coserving": "borrowed-"}  # named actors of a role, when not "<role>-<serial>"
QUICK = [
    "model.preset=nano",
    "sft.checkpoint=artifacts/sft/bench-chaos-quick",
    "sft.steps=5",
    "sft.episodes=50",
    "train.steps=6",
    "train.groups_per_step=2",
    "train.group_size=4",
    "train.eval_every=0",
    "train.eval_episodes=4",  # a smoke run: held-out success is reported, not compared
    "tasks.0.env.kwargs.size=4",
    "tasks.0.agent.max_turns=8",
    # as FULL: each hang (two a run at seed 0) costs a whole timeout; a trajectory cut by a kill is retried, not timed
    # out, so the timeout needs to outlast one trajectory only (a second or two here, under load)
    "async.trajectory_timeout_s=10",
]
FULL = ["train.steps=30", "train.eval_every=0", "async.trajectory_timeout_s=10"]
HANG_S = 10_000.0


def write_latency_trace(path: Path, seed: int, n: int = 20_000, hang_prob: float = 0.002) -> Path:
    """Delays (s) for the ``trace`` latency kind: lognormal (median 10 ms, sigma 1.5) plus rare hangs."""
    rng = np.random.default_rng(seed)
    delays = 0.01 * np.exp(1.5 * rng.standard_normal(n))
    delays[rng.random(n) < hang_prob] = HANG_S
    path.write_text("# rollarc bench chaos: heavy-tailed env-step delays with hangs, seconds\n")
    with path.open("a") as out:
        out.writelines(f"{d:.6f}\n" for d in delays)
    return path


SHARED = [
    "tasks.0.latency.failure_retries=2",  # a transient step failure is retried, not the episode dropped
]


def chaos_overrides(trace: Path) -> list[str]:
    """The chaos run's latency section replaces the config's whole (its own delay model, say longtail's
    lognormal, would otherwise clash with ``kind: trace``), with the shared retries applied again."""
    return [
        f"tasks.0.latency={{kind: trace, trace_path: '{trace}', failure_prob: 0.02}}",
        *SHARED,
        "train.checkpoint_every=1",  # a lost trainer redoes at most the step it was in
    ]


def kill_schedule(steps: int, roles: tuple[str, ...] = ROLES) -> list[tuple[str, int]]:
    """(role, step after which it is killed), each role once, spread evenly over all but the last two steps.

    The last kill leaves two steps to run, so that it lands inside the run even when steps are fast.
    """
    return [(role, max(1, round((i + 1) * (steps - 2) / len(roles)))) for i, role in enumerate(roles)]


def recent_pace(rows: list[dict[str, Any]]) -> float:
    """How long a step takes now: the shortest of the last three logged steps.

    Not the run's median: early steps slowed by preemptions (the spot path's trace) stretch it past two calm
    steps, and a kill meant for "partway into the next step" then lands after the run's last training call.
    The shortest of three ignores the one long step a recovery makes."""
    last = sorted(rows, key=lambda r: r["step"])[-3:]
    return float(min(r.get("step_time_s", r.get("step_s", 0.0)) for r in last))  # the t2i path logs step_s


class Killer(threading.Thread):
    """Watches the run's metrics and kills one actor of each role, in turn, partway into the next step."""

    def __init__(self, runs: Path, schedule: list[tuple[str, int]], kill: Callable[[str], str] | None = None) -> None:
        """``kill``: kills one actor of a role, returns its name (default ``kill_one``, the LLM path's roles)."""
        super().__init__(daemon=True)
        self.runs = runs
        self.schedule = schedule
        self.kill = kill or kill_one
        self.stop = threading.Event()
        self.kills: list[dict[str, Any]] = []

    def _progress(self) -> tuple[int, float]:
        """The highest step logged so far and the current pace (:func:`recent_pace`)."""
        rows = []
        for path in self.runs.glob("chaos-*/metrics.jsonl"):
            for line in path.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # the line being written as we read
                    continue
        if not rows:
            return 0, 0.0
        return max(r["step"] for r in rows), recent_pace(rows)

    def run(self) -> None:
        started = time.time()
        for role, after_step in self.schedule:
            while not self.stop.is_set():
                step, step_time = self._progress()
                if step >= after_step:
                    break
                time.sleep(0.2)
            if self.stop.wait(min(0.5 * step_time, 2.0)):  # partway into the next step, not between two
                return
            if not ray.is_initialized():  # never let a late kill start a Ray of its own
                return
            landed_in = self._progress()[0] + 1  # the step the kill lands in (a later one if steps are fast)
            try:
                name = self.kill(role)
            except (ValueError, RayError) as err:  # nothing of that role to kill: recorded, the run goes on
                name = f"not killed: {err}"
            self.kills.append(
                {
                    "role": role,
                    "actor": name,
                    "after_step": after_step,
                    "landed_in": landed_in,
                    "t_s": time.time() - started,
                }
            )
            print(f"   killed {role} ({name}) after step {after_step}", flush=True)


def kill_one(role: str) -> str:
    """Kill one live actor of ``role`` as a crash would (Ray may restart it); returns its name."""
    if role == "rollout":
        router = ray.get_actor("router")
        # a dedicated replica: a borrowed one (harvest's co-serving replicas, also in the router) is its own role
        names: list[str] = ray.get(router.alive.remote(), timeout=60)
        alive = [n for n in names if n.startswith("rollout-")]
        if not alive:
            raise ValueError("no live dedicated rollout replica")
        replica: str = sorted(alive)[0]
        handle: Any = ray.get(router.handle_of.remote(replica), timeout=60)
        ray.kill(handle, no_restart=False)
        return replica
    if role == "router":
        name = "router"
    else:
        prefix = ACTOR_PREFIX.get(role, f"{role}-")
        names = [n for n in ray.util.list_named_actors() if n.startswith(prefix) and n[len(prefix) :].isdigit()]
        if not names:
            raise ValueError(f"no live {role} actor")
        # the newest trainer (an older one is dead), the oldest EnvWorker or co-serving replica
        by_serial = sorted(names, key=lambda n: int(n[len(prefix) :]))
        name = by_serial[-1] if role == "train" else by_serial[0]
    ray.kill(ray.get_actor(name), no_restart=False)
    return name


def run_one(
    config_path: str,
    overrides: list[str],
    label: str,
    runs: Path,
    killer: Killer | None = None,
    load: Callable[[str, list[str]], Any] = load_train_config,
    train: Callable[[Any], int] = run_training,
) -> dict[str, Any]:
    """One run named ``label`` under ``runs``, with ``killer`` killing during it; ``load`` and ``train``: the
    path's config loader and entry (the t2i path's for ``--path spot``)."""
    cfg = load(config_path, [*overrides, f"name={label}", f"run.dir={runs}", "run.progress=false"])
    error = None
    if killer is not None:
        killer.start()
    try:
        code = train(cfg)
        if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            raise RunStopped(code - 128)  # the user stopped the benchmark, not only this run
        error = None if code == 0 else f"exit code {code}"
    except (RuntimeError, RayError) as err:
        error = f"{type(err).__name__}: {err}"
    finally:
        if killer is not None:
            killer.stop.set()
            killer.join()
    found = [p for p in runs.iterdir() if p.is_dir() and p.name.startswith(f"{label}-")]
    summary_file = found[0] / "summary.json" if found else None
    summary = json.loads(summary_file.read_text()) if summary_file and summary_file.is_file() else {}
    finished = error is None and summary.get("steps") == cfg.train.steps
    return {"crashed": not finished, "error": error, "summary": summary, "steps_planned": cfg.train.steps}


def heldout_success(cfg: Config, summary: dict[str, Any]) -> dict[str, Any] | None:
    """Greedy held-out success of a run's final policy on the clean envs of ``cfg``."""
    checkpoint = summary.get("last_checkpoint")
    if not checkpoint or not (Path(checkpoint) / "policy" / "config.json").is_file():
        return None
    model, tokenizer = load_policy(Path(checkpoint) / "policy")
    return evaluate_local(
        model, tokenizer, list(cfg.tasks), cfg.train.eval_episodes, cfg.train.eval_seed_base, cfg.sampling, cfg.engine
    )


def compare(
    clean: dict[str, Any],
    chaos: dict[str, Any],
    kills: list[dict[str, Any]],
    heldout: tuple[dict[str, Any] | None, dict[str, Any] | None],
) -> dict[str, Any]:
    """The benchmark's result from the two runs' summaries and the held-out evaluations of their final policies."""
    s, c = chaos["summary"], clean["summary"]
    account = s.get("trajectories", {})
    clean_eval, chaos_eval = heldout
    n = clean_eval["episodes"] if clean_eval else 0
    p_clean = clean_eval["success"] if clean_eval else None
    p_chaos = chaos_eval["success"] if chaos_eval else None
    noise = gap = None
    if n and p_chaos is not None and p_clean is not None:
        noise = 2 * math.sqrt((p_chaos * (1 - p_chaos) + p_clean * (1 - p_clean)) / n)
        gap = p_chaos - p_clean
    trainer_losses = s.get("trainer_restarts", 0)
    return {
        "crashed": chaos["crashed"],
        "error": chaos["error"],
        "steps": s.get("steps"),
        "kills": kills,
        "reward_role": "absent (rule reward, computed in the EnvWorker)",
        "restarts": {
            "env": s.get("env_worker_restarts", 0),
            "rollout": s.get("rollout_restarts", 0),
            "router": s.get("router_restarts", 0),
            "train": trainer_losses,
        },
        "steps_lost": s.get("steps_lost"),
        "trainer_losses": trainer_losses,
        "steps_lost_per_trainer_loss": (s.get("steps_lost", 0) / trainer_losses) if trainer_losses else 0.0,
        **trajectory_counts(account),
        "failure_reasons": s.get("failure_reasons", {}),
        # env-step failures injected (each retried or failing its trajectory), as counted by the live
        # EnvWorkers at the end: a killed worker takes its count with it, so this is a lower bound
        "env_step_failures_injected": sum(w.get("injected_failures", 0) for w in s.get("env_workers", [])),
        "heldout_success_chaos": p_chaos,
        "heldout_success_clean": p_clean,
        "heldout_episodes": n,
        "success_gap": gap,
        "noise_2se": noise,
        "within_noise": (abs(gap) <= noise) if gap is not None and noise is not None else None,
        "clean_crashed": clean["crashed"],
        "rl_wall_s": {"clean": c.get("rl_wall_s"), "chaos": s.get("rl_wall_s")},
    }


def trajectory_counts(account: dict[str, Any]) -> dict[str, Any]:
    """The ledger's counts (``summary.json`` "trajectories") under the benchmark's names."""
    keys = ("started", "failed", "cancelled", "retried", "lost")
    return {f"trajectories_{key}": account.get(key) for key in keys}


def kills_line(kills: list[dict[str, Any]]) -> str:
    return ", ".join(f"{k['role']} after {k['after_step']}" for k in kills)


def kill_rows(result: dict[str, Any]) -> list[list[Any]]:
    """The first rows of a one-run chaos table (``--path harvest|spot``): finished or not, the kills, the restarts."""
    restarts = result["restarts"]
    return [
        ["crashed", result["crashed"]],
        ["killed (role after step)", kills_line(result["kills"])],
        ["restarts " + " / ".join(restarts), " / ".join(str(v) for v in restarts.values())],
    ]


def aggregate(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """The benchmark's keys over seeds: sums of the counts, the mean held-out gap and its noise."""
    first = per_seed[0]
    both = [r for r in per_seed if r["success_gap"] is not None]
    gap = chaos_mean = clean_mean = noise = None
    if both:
        n = len(both)
        chaos_vals = [r["heldout_success_chaos"] for r in both]
        clean_vals = [r["heldout_success_clean"] for r in both]
        chaos_mean, clean_mean = sum(chaos_vals) / n, sum(clean_vals) / n
        gap = chaos_mean - clean_mean
        eval_se = math.sqrt(sum((r["noise_2se"] / 2) ** 2 for r in both)) / n
        seed_se = math.sqrt(_var(chaos_vals) / n + _var(clean_vals) / n) if n >= 2 else 0.0
        noise = 2 * max(eval_se, seed_se)
    trainer_losses = sum(r["trainer_losses"] for r in per_seed)
    steps_lost = sum(r["steps_lost"] or 0 for r in per_seed)
    return {
        "seeds": [r["seed"] for r in per_seed],
        "crashed": any(r["crashed"] for r in per_seed),
        "error": next((r["error"] for r in per_seed if r["error"]), None),
        "steps": first["steps"],
        "reward_role": first["reward_role"],
        "restarts": {role: sum(r["restarts"][role] for r in per_seed) for role in first["restarts"]},
        "steps_lost": steps_lost,
        "trainer_losses": trainer_losses,
        "steps_lost_per_trainer_loss": max(r["steps_lost_per_trainer_loss"] for r in per_seed),
        **{
            key: _sum_known(r[key] for r in per_seed)
            for key in (
                "trajectories_started",
                "trajectories_failed",
                "trajectories_cancelled",
                "trajectories_retried",
                "trajectories_lost",
                "env_step_failures_injected",
            )
        },
        "failure_reasons": dict(sum((Counter(r["failure_reasons"]) for r in per_seed), Counter())),
        "heldout_success_chaos": chaos_mean,
        "heldout_success_clean": clean_mean,
        "heldout_episodes": first["heldout_episodes"],
        "success_gap": gap,
        "noise_2se": noise,
        "within_noise": (abs(gap) <= noise) if gap is not None and noise is not None else None,
        "clean_crashed": None  # no clean run (--quick)
        if all(r["clean_crashed"] is None for r in per_seed)
        else any(r["clean_crashed"] for r in per_seed),
        "per_seed": per_seed,
    }


def _var(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def _sum_known(values: Any) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


# what compare() reads of a clean run that did not run (--quick): nothing, so every clean figure is null
NO_CLEAN_RUN: dict[str, Any] = {"crashed": None, "error": None, "summary": {}}


def run_seed(config_path: str, overrides: list[str], seed: int, runs: Path, clean_run: bool = True) -> dict[str, Any]:
    """The clean and the chaos run of one seed, and their comparison (``clean_run=False``: the chaos run alone)."""
    overrides = [*overrides, f"seed={seed}"]
    base = load_train_config(config_path, overrides)
    runs.mkdir(parents=True, exist_ok=True)
    trace = write_latency_trace(runs / "latency_trace.txt", base.seed)
    clean = NO_CLEAN_RUN
    if clean_run:
        print(f"== seed {seed}: clean", flush=True)
        clean = run_one(config_path, overrides, "clean", runs)
    print(f"== seed {seed}: chaos", flush=True)
    killer = Killer(runs, kill_schedule(base.train.steps))
    chaos = run_one(config_path, [*overrides, *chaos_overrides(trace)], "chaos", runs, killer)
    print(f"== seed {seed}: held-out evaluation of both final policies on the clean envs", flush=True)
    heldout = (heldout_success(base, clean["summary"]), heldout_success(base, chaos["summary"]))
    return {"seed": seed, **compare(clean, chaos, killer.kills, heldout)}


def main(argv: list[str]) -> int:
    parser = bench_parser(
        "bench chaos",
        __doc__,
        quick="a short smoke run (nano model, 6 steps, 1 seed, the chaos run alone); publishes nothing",
        config_help="default: configs/quickstart.yaml (llm), the path's own",
        seeds="run seeds 0 … N-1 (default 2; 1 with --quick)",
        runs=RUNS_HELP,
    )
    parser.add_argument(
        "--path",
        choices=PATHS,
        default=None,
        help="llm (the default), harvest (borrowed serving capacity) or spot (t2i on spot workers); "
        "default: read from --config (a harvest: section, kind: t2i with spot)",
    )
    add_overrides(parser)
    args = parser.parse_args(argv)
    from rollarc.bench import chaos_path  # deferred: a cycle (chaos_path builds on this module)

    path = args.path or (chaos_path.path_of(args.config) if args.config else "llm")
    if path != "llm":
        return chaos_path.main(path, args)
    args.config = args.config or "configs/quickstart.yaml"
    seeds = seed_count(parser, args, 2)
    overrides = [*(QUICK if args.quick else FULL), *SHARED, *args.overrides]
    base = load_train_config(args.config, overrides)
    policy, _ = initial_policy(base)  # one SFT warm start for every run
    overrides.append(f"model.path={policy}")
    runs = runs_folder(args.runs, "chaos")
    per_seed = [run_seed(args.config, overrides, seed, runs / f"seed{seed}", not args.quick) for seed in range(seeds)]
    result = aggregate(per_seed)
    return finish("chaos", docs_body(result, per_seed, base), result, "rollarc bench chaos", args)


def docs_body(result: dict[str, Any], per_seed: list[dict[str, Any]], base: Config) -> str:
    """The block: what was killed and restarted, what was lost, and held-out success with and without chaos."""

    def pair(key: str) -> str:
        return " / ".join("-" if r[key] is None else f"{r[key]:.3f}" for r in per_seed)

    rows = [
        ["crashed", result["crashed"]],
        ["killed per seed (role after step)", kills_line(first_kills(per_seed))],
        ["restarts env / rollout / router / train", " / ".join(str(v) for v in result["restarts"].values())],
        ["reward role", result["reward_role"]],
        ["steps lost (redone after trainer losses)", result["steps_lost"]],
        ["env-step failures injected (at least)", result["env_step_failures_injected"]],
        [
            "trajectories started / failed / lost",
            f"{result['trajectories_started']} / {result['trajectories_failed']} / {result['trajectories_lost']}",
        ],
        ["held-out success chaos, per seed", pair("heldout_success_chaos")],
        ["held-out success clean, per seed", pair("heldout_success_clean")],
        ["mean gap (chaos - clean)", _fmt(result["success_gap"])],
        ["noise (2 standard errors)", "-" if result["noise_2se"] is None else f"{result['noise_2se']:.3f}"],
    ]
    return markdown_table(["", "value"], rows) + (
        f"\n\n{base.train.steps} steps of {base.train.groups_per_step * base.train.group_size} trajectories; "
        f"seeds {', '.join(str(s) for s in result['seeds'])}; {result['heldout_episodes']} held-out episodes "
        "per run."
    )


def first_kills(per_seed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kills: list[dict[str, Any]] = per_seed[0]["kills"]
    return kills


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"
