"""Is the DiT worth scheduling? One denoising step's compute against the per-call overhead around it.

Spotlight schedules denoising work (jobs of candidate seeds, SP groups, in-flight commits). That only
pays when a denoising step costs well more than what every call costs anyway. For a config (by default
``configs/t2i_bench.yaml``) and, in the same process, its baseline (``configs/t2i_quickstart.yaml``):

- ``step_ms_batch1``: one SDE denoising step (the DiT forward and the SDE update, ``sample_sde``'s loop
  body) of one image, in process, at the sampler role's torch threads; median of the repetitions.
- ``step_ms_per_image``: the same step over a training batch (``prompts_per_step × group_size`` images),
  per image.
- ``dispatch_floor_ms``: the batch-1 step of the same architecture (layers, heads, image size) at the
  smallest width (2 per head): what running its layers costs in Python and kernel dispatch, with next to
  no arithmetic.
- ``ray_call_ms``: the round trip of a no-op call to a ``T2ISampler`` actor placed as ``rollarc train``
  places the sampler (Ray started by the same ``start_cluster``, with the measured config's pools; the
  baseline's sampler pool must be one of them).
- ``ray_sample_ms_batch1``: ``T2ISampler.sample`` of one image for one denoising step through Ray, as
  the controller calls it (the step, the reward, the trajectory's transfer).
- ``overhead_ms = ray_call_ms + dispatch_floor_ms`` and ``step_over_overhead = step_ms_batch1 /
  overhead_ms``: how many times the per-call overhead one step of one image costs.

The baseline's figures carry a ``baseline_`` prefix. The DiT's weights do not change its cost, so both
start from fresh weights (no pretraining). Figures are published only by a full run (``--no-docs``
and ``--quick`` never write docs/).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
import torch

from rollarc.algo.flow_sde import sde_step, time_grid
from rollarc.bench.harness import bench_parser, finish
from rollarc.bench.report_file import markdown_table
from rollarc.diffusion.config import CACHE, T2IConfig, load_t2i_config
from rollarc.diffusion.model import T2IPolicy, build_policy
from rollarc.diffusion.sampling import seeded_noise
from rollarc.diffusion.tasks.registry import make_task, vocabulary
from rollarc.diffusion.workers import T2ISampler
from rollarc.runtime.ray_cluster import RayStart, start_cluster, stop_ray
from rollarc.runtime.t2i_entry import role_options

COMMAND = "rollarc bench ditstep --json"


def params(policy: T2IPolicy) -> int:
    return sum(p.numel() for p in policy.transformer.parameters())


def median_ms(run: Callable[[], Any], reps: int, warmup: int = 1) -> float:
    """Median wall time of ``run()`` in milliseconds over ``reps`` calls, after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def step_fn(policy: T2IPolicy, prompt: str, batch: int, noise_level: float) -> Callable[[], Any]:
    """One SDE denoising step of ``batch`` images, exactly as ``sample_sde``'s loop runs it (first step)."""
    size = policy.image_size
    x, noise = seeded_noise(list(range(batch)), (3, size, size), 1)
    grid = time_grid(2).tolist()
    with torch.no_grad():  # as in sample_sde
        context = policy.encode([prompt] * batch)
    t = torch.full((batch,), grid[0])

    @torch.no_grad()
    def run() -> Any:
        v = policy.velocity(x, t, context)
        return sde_step(x, v, grid[0], grid[1], noise[0], noise_level, grid[1])

    return run


def floor_width(heads: int) -> int:
    """The width of the dispatch-floor DiT: ``heads`` heads of 2 dimensions each (same layers, next to no maths)."""
    return 2 * heads


def summarise(times: dict[str, float]) -> dict[str, float]:
    """The derived figures from the measured ones (all in milliseconds)."""
    overhead = times["ray_call_ms"] + times["dispatch_floor_ms"]
    return {**times, "overhead_ms": overhead, "step_over_overhead": times["step_ms_batch1"] / overhead}


def measure(cfg: T2IConfig, reps: int, workdir: Path) -> dict[str, Any]:
    """The figures of one config; Ray must be running with its pools (``start_cluster(ray_start(cfg))``)."""
    mc, tc = cfg.model, cfg.train
    threads = cfg.cluster.roles.sampler.threads
    torch.set_num_threads(threads)
    tasks = [make_task(name, CACHE) for name in cfg.tasks]
    vocab = vocabulary(tasks)
    prompt = tasks[0].prompts()[0]
    policy = build_policy(vocab, mc.image_size, mc.width, mc.layers, mc.heads, cfg.pretrain.seed).eval()
    floor = build_policy(vocab, mc.image_size, floor_width(mc.heads), mc.layers, mc.heads, 0).eval()
    batch = tc.prompts_per_step * tc.group_size
    times = {
        "step_ms_batch1": median_ms(step_fn(policy, prompt, 1, tc.noise_level), reps),
        "step_ms_per_image": median_ms(step_fn(policy, prompt, batch, tc.noise_level), max(1, reps // 4)) / batch,
        "dispatch_floor_ms": median_ms(step_fn(floor, prompt, 1, tc.noise_level), reps),
    }
    policy_dir = workdir / f"policy-{cfg.name}"
    policy.save(policy_dir)
    sampler = T2ISampler.options(**role_options(cfg.cluster, "sampler")).remote(  # type: ignore[attr-defined]  # @ray.remote class
        str(policy_dir), cfg.tasks, str(CACHE), threads, 0, 1
    )
    times["ray_call_ms"] = median_ms(lambda: ray.get(sampler.ping.remote()), reps * 5, warmup=3)
    times["ray_sample_ms_batch1"] = median_ms(
        lambda: ray.get(sampler.sample.remote([prompt], [0], 1, tc.noise_level)), reps
    )
    ray.kill(sampler)
    return {
        "config": cfg.name,
        "params": params(policy),
        "image_size": mc.image_size,
        "tokens": (mc.image_size // 2) ** 2,
        "batch": batch,
        "threads": threads,
        **summarise(times),
    }


def docs_body(result: dict[str, Any]) -> str:
    keys = ["params", "image_size", "step_ms_batch1", "step_ms_per_image", "dispatch_floor_ms", "ray_call_ms"]
    keys += ["ray_sample_ms_batch1", "overhead_ms", "step_over_overhead"]
    rows = [[k, result[k], result[f"baseline_{k}"]] for k in keys]
    return markdown_table(["", result["config"], result["baseline_config"]], rows)


def main(argv: list[str]) -> int:
    parser = bench_parser(
        "bench ditstep",
        __doc__,
        quick="3 repetitions, for smoke tests; never publishes",
        config="configs/t2i_bench.yaml",
        config_help="the t2i config measured",
    )
    parser.add_argument("--baseline", default="configs/t2i_quickstart.yaml", help="the t2i config compared with")
    parser.add_argument("--reps", type=int, default=20, help="repetitions per figure (--quick: 3)")
    args = parser.parse_args(argv)
    cfg, base = load_t2i_config(args.config), load_t2i_config(args.baseline)
    reps = 3 if args.quick else args.reps
    # the sampler's pools, started as `rollarc train` starts them (a spot run's fleet is not needed here)
    start_cluster(RayStart(pools=cfg.cluster.pools, num_cpus=cfg.cluster.num_cpus), device="cpu")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            measured = measure(cfg, reps, Path(tmp))
            baseline = measure(base, reps, Path(tmp))
    finally:
        stop_ray()
    result = {**measured, **{f"baseline_{k}": v for k, v in baseline.items()}}
    result["step_ratio_vs_baseline"] = measured["step_ms_per_image"] / baseline["step_ms_per_image"]
    print(
        f"{cfg.name}: {measured['params'] / 1e6:.2f} M parameters, one denoising step of one image "
        f"{measured['step_ms_batch1']:.1f} ms = {measured['step_over_overhead']:.1f}× the per-call overhead "
        f"({measured['overhead_ms']:.1f} ms); {base.name}: {baseline['step_over_overhead']:.1f}×",
        flush=True,
    )
    return finish("ditstep", docs_body(result), result, COMMAND, args)
