"""``rollarc bench reward``: a serverless, autoscaled reward model vs dedicated pools, on bursty arrivals.

One process run, one local Ray cluster, the real progress judge (``rollarc.rewards``) behind the same
Serve deployment in every set-up, fed by the same arrivals:

1. **Arrivals.** Finished trajectories of a wave-by-wave asynchronous rollout with long-tailed env
   steps (:func:`rollarc.rewards.arrivals.wave_arrivals`, the ``long_tail`` latency preset), or a
   recorded run (``--trace RUN/timeline.jsonl``). Each request carries the token tail of a real
   trajectory (noisy-expert FrozenLake episodes).
2. **Service cost.** The judge itself takes a few milliseconds per batch on a CPU, so one replica
   would cover any load here. To stand in for a GPU-sized reward model, every batch also waits
   ``--fixed-s + --per-item-s x batch`` seconds (``reward.service_cost``, an ``asyncio.sleep``: it
   occupies the replica, not a CPU). The judge's own cost is measured and reported separately.
3. **Sizing.** One replica's throughput is measured (closed loop, full batches). The peak-sized pool
   covers the highest arrival rate over any ``--window-s`` window; the mean-sized pool covers the
   mean rate. The serverless deployment keeps ``--warm-floor`` warm replicas and may grow to
   ``--burst-factor`` x the peak-sized pool.
4. **Replay.** For each set-up, each request is sent at its arrival time; its latency is how long
   that trajectory waited for its reward. Cost is replica-seconds, sampled from the Serve controller
   (every replica that holds resources: starting, running or stopping) from the first arrival until
   the last answer.
5. **Cold start.** A deployment scaled to zero gets one request (cold), then another (warm).

The last line is JSON: ``replica_s`` and ``p99_latency_s`` (maps per set-up) and
``cost_ratio_serverless_vs_peak``, among others.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from ray import serve

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.runner import RewardFailure
from rollarc.bench.harness import bench_parser, finish, quick_or
from rollarc.bench.report_file import markdown_table
from rollarc.config import ClusterConfig, PoolConfig, RoleConfig, RolesConfig, load_train_config
from rollarc.envs.latency import PRESETS
from rollarc.models.tokenizer import build_tokenizer
from rollarc.rayproc.local_start import init_local_ray
from rollarc.rewards.arrivals import mean_rate, peak_rate, replicas_for, timeline_arrivals, wave_arrivals
from rollarc.rewards.client import RewardClient
from rollarc.rewards.config import AutoscalingConfig, BatchingConfig, RewardConfig, RewardTrainConfig, ServiceCostConfig
from rollarc.rewards.data import generate_examples
from rollarc.rewards.deployment import DEPLOYMENT_NAME
from rollarc.rewards.judge import read_meta
from rollarc.rewards.meter import ReplicaMeter, replica_states
from rollarc.rewards.service import RewardBackend, connect
from rollarc.rewards.train import train_reward_model

APP = "rollarc-bench-reward"
POOL_UNITS = 64
SHIPPED_JUDGE = Path("artifacts/reward/serverless_reward")
BENCH_JUDGE = Path("artifacts/reward/bench")
MODES = ("serverless", "dedicated_peak", "dedicated_mean")


@dataclass(frozen=True)
class ModeResult:
    mode: str
    replicas: str  # "1..8" for serverless, the pool size for dedicated
    replica_s: float
    window_s: float
    latencies: np.ndarray
    failed: int
    peak_replicas: int

    def row(self) -> dict[str, Any]:
        lat = self.latencies
        return {
            "replica_s": self.replica_s,
            "window_s": self.window_s,
            "replicas": self.replicas,
            "peak_replicas_seen": self.peak_replicas,
            "requests": int(len(lat) + self.failed),
            "failed": self.failed,
            "p50_latency_s": _pct(lat, 50),
            "p99_latency_s": _pct(lat, 99),
            "mean_wait_s": float(lat.mean()) if len(lat) else float("nan"),
            "max_wait_s": float(lat.max()) if len(lat) else float("nan"),
            "total_wait_s": float(lat.sum()),
        }


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = bench_parser("bench reward", __doc__, quick="a small run for smoke tests (writes nothing into docs/)")
    p.add_argument("--trace", default=None, help="replay a run's timeline.jsonl instead of generated waves")
    p.add_argument("--waves", type=int, default=None, help="rollout waves (training steps); default 3, quick 2")
    p.add_argument("--trajectories", type=int, default=None, help="trajectories per wave; default 128, quick 16")
    p.add_argument("--turns", type=int, default=None, help="turns per trajectory; default 8, quick 3")
    p.add_argument("--period-s", type=float, default=None, help="seconds between waves; default 30, quick 2")
    p.add_argument("--fixed-s", type=float, default=0.2, help="service cost per batch (seconds)")
    p.add_argument("--per-item-s", type=float, default=0.025, help="service cost per trajectory in a batch (seconds)")
    p.add_argument("--max-batch-size", type=int, default=4)
    p.add_argument("--window-s", type=float, default=1.0, help="window of the peak arrival rate")
    p.add_argument("--warm-floor", type=int, default=1, help="serverless min_replicas")
    p.add_argument("--burst-factor", type=float, default=1.0, help="serverless max_replicas = factor x peak pool")
    p.add_argument("--downscale-delay-s", type=float, default=3.0)
    p.add_argument("--target-ongoing", type=float, default=2.0, help="serverless target_ongoing_requests per replica")
    p.add_argument("--model", default=None, help="judge directory (default: the shipped config's, else trained)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name, full, small in [("waves", 3, 2), ("trajectories", 128, 16), ("turns", 8, 3), ("period_s", 30.0, 2.0)]:
        setattr(args, name, quick_or(getattr(args, name), args.quick, full, small))
    return args


def judge_dir(args: argparse.Namespace, log: Any) -> Path:
    """The judge to serve: ``--model``, the shipped config's, or a small one trained now (cost is what matters)."""
    if args.model:
        return Path(args.model)
    if (SHIPPED_JUDGE / "judge.json").is_file():
        return SHIPPED_JUDGE
    if not (BENCH_JUDGE / "judge.json").is_file():
        log(f"no judge at {SHIPPED_JUDGE}: training a small one at {BENCH_JUDGE}")
        cfg = load_train_config(
            Path(__file__).resolve().parents[2] / "configs" / "serverless_reward.yaml",
            [f"reward.model_path={BENCH_JUDGE}", "reward.train.episodes=400", "reward.train.steps=100"],
        )
        train_reward_model(cfg, log=log)
    return BENCH_JUDGE


def payloads(count: int, context_tokens: int, seed: int) -> list[list[int]]:
    """Token tails of real noisy-expert FrozenLake trajectories (what the judge reads in training runs)."""

    cfg = load_train_config(Path(__file__).resolve().parents[2] / "configs" / "serverless_reward.yaml")
    train = RewardTrainConfig(episodes=count, seed_base=40_000_000, seed=seed)
    examples = generate_examples(list(cfg.tasks), ChatRenderer(build_tokenizer()), cfg.sampling, train, context_tokens)
    return [e.tokens for e in examples]


def cluster_for(replicas: int) -> ClusterConfig:
    return ClusterConfig(
        pools={"compute": PoolConfig(count=2), "cpu": PoolConfig(count=4), "reward": PoolConfig(count=POOL_UNITS)},
        roles=RolesConfig(reward=RoleConfig(pool="reward", replicas=replicas, units=1, threads=1)),
    )


def reward_config(
    kind: str, args: argparse.Namespace, cost: ServiceCostConfig, autoscaling: AutoscalingConfig | None = None
) -> RewardConfig:
    return RewardConfig(
        kind=kind,
        app_name=APP,
        timeout_s=120.0,
        max_retries=2,
        batching=BatchingConfig(max_batch_size=args.max_batch_size, batch_wait_timeout_s=0.005),
        service_cost=cost,
        autoscaling=autoscaling or AutoscalingConfig(),
    )


def deploy(reward: RewardConfig, model: Path, replicas: int) -> tuple[RewardBackend, RewardClient]:
    backend = RewardBackend(reward, str(model), cluster_for(replicas)).start()
    return backend, connect(backend.client_spec())


def undeploy(backend: RewardBackend) -> None:
    serve.delete(backend.reward.app_name)


async def closed_loop_throughput(
    client: RewardClient, tokens: list[list[int]], in_flight: int, seconds: float
) -> tuple[float, float]:
    """Items per second with ``in_flight`` requests always outstanding, and their median latency."""
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds
    done = 0
    latencies: list[float] = []

    async def worker(offset: int) -> None:
        nonlocal done
        index = offset
        while loop.time() < stop_at:
            start = loop.time()
            await client.score_tokens(tokens[index % len(tokens)])
            latencies.append(loop.time() - start)
            done += 1
            index += in_flight

    start = loop.time()
    await asyncio.gather(*[worker(i) for i in range(in_flight)])
    return done / (loop.time() - start), float(np.median(latencies))


def measure_capacity(
    args: argparse.Namespace, model: Path, tokens: list[list[int]], cost: ServiceCostConfig, seconds: float
) -> tuple[float, float]:
    backend, client = deploy(reward_config("dedicated", args, cost), model, 1)
    try:
        asyncio.run(client.score_tokens(tokens[0]))  # warm the handle and the replica
        return asyncio.run(closed_loop_throughput(client, tokens, 2 * args.max_batch_size, seconds))
    finally:
        undeploy(backend)


async def replay(
    client: RewardClient, arrivals: np.ndarray, tokens: list[list[int]]
) -> tuple[float, float, list[float], int]:
    """Send each request at its arrival time; (start, end) perf_counter times, latencies, failures."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    start_perf = time.perf_counter()
    failures = 0

    async def one(index: int, at: float) -> float | None:
        nonlocal failures
        await asyncio.sleep(max(0.0, t0 + at - loop.time()))
        sent = loop.time()
        try:
            await client.score_tokens(tokens[index % len(tokens)])
        except RewardFailure:
            failures += 1
            return None
        return loop.time() - sent

    results = await asyncio.gather(*[one(i, float(at)) for i, at in enumerate(arrivals)])
    return start_perf, time.perf_counter(), [r for r in results if r is not None], failures


def run_mode(
    mode: str,
    args: argparse.Namespace,
    model: Path,
    tokens: list[list[int]],
    arrivals: np.ndarray,
    cost: ServiceCostConfig,
    peak: int,
    mean: int,
    log: Any,
) -> ModeResult:
    if mode == "serverless":
        top = max(args.warm_floor, 1, math.ceil(args.burst_factor * peak))
        scaling = AutoscalingConfig(
            min_replicas=args.warm_floor,
            max_replicas=top,
            target_ongoing_requests=args.target_ongoing,
            upscale_delay_s=0.0,
            downscale_delay_s=args.downscale_delay_s,
            metrics_interval_s=0.2,
            look_back_period_s=0.6,
        )
        backend, client = deploy(reward_config("serverless", args, cost, scaling), model, 0)
        label = f"{args.warm_floor}..{top}"
    else:
        size = peak if mode == "dedicated_peak" else mean
        backend, client = deploy(reward_config("dedicated", args, cost), model, size)
        label = str(size)
    meter = ReplicaMeter(APP, DEPLOYMENT_NAME, interval_s=0.1).start()
    try:
        t0, t1, latencies, failed = asyncio.run(replay(client, arrivals, tokens))
    finally:
        meter.stop()
        undeploy(backend)
    result = ModeResult(
        mode=mode,
        replicas=label,
        replica_s=meter.replica_seconds(t0, t1),
        window_s=t1 - t0,
        latencies=np.array(latencies),
        failed=failed,
        peak_replicas=meter.peak,
    )
    row = result.row()
    log(
        f"  {mode:15s} replicas {label:>6s}  replica-s {row['replica_s']:7.1f}  p50 {row['p50_latency_s']:.3f} s  "
        f"p99 {row['p99_latency_s']:.3f} s  mean wait {row['mean_wait_s']:.3f} s  failed {failed}"
    )
    return result


def measure_cold_start(
    args: argparse.Namespace, model: Path, tokens: list[list[int]], cost: ServiceCostConfig, repeats: int
) -> dict[str, float]:
    """Latency of a request to a deployment scaled to zero (cold) and of the next one (warm)."""
    scaling = AutoscalingConfig(
        min_replicas=0,
        initial_replicas=0,
        max_replicas=1,
        upscale_delay_s=0.0,
        downscale_delay_s=0.5,
        downscale_to_zero_delay_s=0.5,
        metrics_interval_s=0.2,
        look_back_period_s=0.4,
    )
    backend, client = deploy(reward_config("serverless", args, cost, scaling), model, 0)
    cold, warm = [], []
    try:
        for _ in range(repeats):
            _wait_for_replicas(0, timeout_s=60.0)
            start = time.perf_counter()
            asyncio.run(client.score_tokens(tokens[0]))
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            asyncio.run(client.score_tokens(tokens[1]))
            warm.append(time.perf_counter() - start)
    finally:
        undeploy(backend)
    return {"cold_start_s": float(np.median(cold)), "warm_s": float(np.median(warm)), "repeats": repeats}


def _wait_for_replicas(count: int, timeout_s: float) -> None:
    deadline = time.perf_counter() + timeout_s
    while sum(replica_states(APP, DEPLOYMENT_NAME).values()) != count:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the reward deployment did not reach {count} replicas in {timeout_s:g} s")
        time.sleep(0.1)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    logging.getLogger("ray.serve").setLevel(logging.ERROR)  # per-request routing warnings drown the progress lines
    model = judge_dir(args, log)
    if args.trace:
        arrivals = timeline_arrivals(args.trace)
        source = f"recorded: {args.trace}"
    else:
        arrivals = wave_arrivals(
            args.waves, args.trajectories, args.turns, args.period_s, PRESETS["long_tail"], seed=args.seed
        )
        source = (
            f"generated: {args.waves} waves x {args.trajectories} trajectories x {args.turns} turns, "
            f"every {args.period_s:g} s, long_tail env steps"
        )
    tokens = payloads(64 if args.quick else 256, int(read_meta(model)["spec"]["context_tokens"]), args.seed)
    peak_r, mean_r = peak_rate(arrivals, args.window_s), mean_rate(arrivals)
    log(
        f"arrivals ({source}): {len(arrivals)} over {arrivals[-1]:.1f} s; peak {peak_r:.1f}/s "
        f"(over {args.window_s:g} s), mean {mean_r:.1f}/s"
    )
    measured = measure(args, model, tokens, arrivals, peak_r, mean_r)
    rows = {mode: r.row() for mode, r in measured.pop("results").items()}
    arrival = {"source": source, "count": len(arrivals), "span_s": float(arrivals[-1])}
    result = comparison(args, rows, measured, arrival | {"peak_rate_per_s": peak_r, "mean_rate_per_s": mean_r})
    log(
        f"serverless vs peak-sized pool: {result['cost_ratio_serverless_vs_peak']:.2f}x the replica-seconds, "
        f"{result['p99_ratio_serverless_vs_peak']:.2f}x the p99 latency "
        f"(goal: <= 0.5x and <= 2x: {'met' if result['goal_met'] else 'not met'})"
    )
    return finish("reward", docs_body(result, rows), result, "rollarc bench reward", args)


def log(message: str) -> None:
    print(message, flush=True)


def measure(
    args: argparse.Namespace,
    model: Path,
    tokens: list[list[int]],
    arrivals: np.ndarray,
    peak_r: float,
    mean_r: float,
) -> dict[str, Any]:
    """On a local Ray with Serve: one replica's capacity, then every set-up on the arrivals, then a cold start."""
    init_local_ray(
        num_cpus=2,
        resources={"pool_reward": POOL_UNITS, "pool_compute": 2, "pool_cpu": 4},
        include_dashboard=False,
        logging_level=logging.WARNING,
    )
    serve.start(proxy_location="Disabled", logging_config={"log_level": "WARNING"})
    try:
        cost = ServiceCostConfig(fixed_s=args.fixed_s, per_item_s=args.per_item_s)
        seconds = 1.0 if args.quick else 5.0  # quick: a smoke run, whose capacity (a few batches) is only rough
        real_capacity, real_latency = measure_capacity(args, model, tokens, ServiceCostConfig(), seconds)
        capacity, _capacity_latency = measure_capacity(args, model, tokens, cost, seconds)
        peak, mean = replicas_for(peak_r, capacity), replicas_for(mean_r, capacity)
        log(
            f"one replica: {capacity:.1f} trajectories/s with the service cost "
            f"({args.fixed_s:g} s + {args.per_item_s:g} s x batch, batch {args.max_batch_size}); "
            f"{real_capacity:.0f}/s with the judge alone (median latency {real_latency * 1e3:.1f} ms)"
        )
        log(f"pools: peak-sized {peak} replicas, mean-sized {mean}")
        results = {mode: run_mode(mode, args, model, tokens, arrivals, cost, peak, mean, log) for mode in MODES}
        cold = measure_cold_start(args, model, tokens, cost, repeats=1 if args.quick else 3)
        log(
            f"cold start: {cold['cold_start_s']:.2f} s to the first answer from zero replicas; "
            f"warm {cold['warm_s']:.3f} s"
        )
    finally:
        serve.shutdown()
        ray.shutdown()
    return {
        "results": results,
        "cost": cost,
        "capacity": capacity,
        "peak": peak,
        "mean": mean,
        "cold": cold,
        "real_model": {
            "capacity_per_replica": real_capacity,
            "median_latency_s": real_latency,
            "peak_pool": replicas_for(peak_r, real_capacity),
            "mean_pool": replicas_for(mean_r, real_capacity),
        },
    }


def comparison(
    args: argparse.Namespace, rows: dict[str, dict[str, Any]], measured: dict[str, Any], arrivals: dict[str, Any]
) -> dict[str, Any]:
    """The JSON line: every set-up's cost and latency, and serverless against the peak-sized pool."""
    cost_ratio = rows["serverless"]["replica_s"] / rows["dedicated_peak"]["replica_s"]
    p99_ratio = rows["serverless"]["p99_latency_s"] / rows["dedicated_peak"]["p99_latency_s"]
    peak, mean = measured["peak"], measured["mean"]
    return {
        "bench": "reward",
        "quick": args.quick,
        "arrivals": arrivals,
        "service_cost": measured["cost"].model_dump() | {"max_batch_size": args.max_batch_size},
        "capacity_per_replica": measured["capacity"],
        "pool_sizes": {"dedicated_peak": peak, "dedicated_mean": mean, "serverless": rows["serverless"]["replicas"]},
        "replica_s": {m: rows[m]["replica_s"] for m in MODES},
        "p50_latency_s": {m: rows[m]["p50_latency_s"] for m in MODES},
        "p99_latency_s": {m: rows[m]["p99_latency_s"] for m in MODES},
        "mean_wait_s": {m: rows[m]["mean_wait_s"] for m in MODES},
        "total_wait_s": {m: rows[m]["total_wait_s"] for m in MODES},
        "failed": {m: rows[m]["failed"] for m in MODES},
        "cost_ratio_serverless_vs_peak": cost_ratio,
        "p99_ratio_serverless_vs_peak": p99_ratio,
        "goal_met": bool(cost_ratio <= 0.5 and p99_ratio <= 2.0),
        "cold_start": measured["cold"],
        "real_model": measured["real_model"],
    }


def docs_body(result: dict[str, Any], rows: dict[str, dict[str, Any]]) -> str:
    table = markdown_table(
        ["set-up", "replicas", "replica-s (cost)", "p50 latency s", "p99 latency s", "mean wait s", "failed"],
        [
            [
                m,
                rows[m]["replicas"],
                rows[m]["replica_s"],
                rows[m]["p50_latency_s"],
                rows[m]["p99_latency_s"],
                rows[m]["mean_wait_s"],
                rows[m]["failed"],
            ]
            for m in MODES
        ],
    )
    arrivals, cost, cold, real = result["arrivals"], result["service_cost"], result["cold_start"], result["real_model"]
    return "\n".join(
        [
            f"Arrivals ({arrivals['source']}): {arrivals['count']} trajectories over {arrivals['span_s']:.0f} s, peak "
            f"{arrivals['peak_rate_per_s']:.0f}/s, mean {arrivals['mean_rate_per_s']:.1f}/s. Service cost per batch "
            f"{cost['fixed_s']:g} s + {cost['per_item_s']:g} s x batch (batch <= {cost['max_batch_size']}): "
            f"{result['capacity_per_replica']:.1f} trajectories/s per replica.",
            "",
            table,
            "",
            f"Serverless vs the peak-sized pool: **{result['cost_ratio_serverless_vs_peak']:.2f}x** the replica-seconds, "
            f"**{result['p99_ratio_serverless_vs_peak']:.2f}x** the p99 latency. Cold start (first answer from zero "
            f"replicas): {cold['cold_start_s']:.2f} s (warm: {cold['warm_s']:.3f} s). The judge alone (no added cost): "
            f"{real['capacity_per_replica']:.0f} trajectories/s per replica, median latency "
            f"{real['median_latency_s'] * 1e3:.1f} ms, so one replica covers this peak.",
        ]
    )
