"""A cluster-scale SimPy scenario of ROSE: a serving fleet under a diurnal load lends its idle capacity to an
RL job's rollouts. It uses the planner's cost model (``rollarc.cluster.engine_cost`` on catalogue GPUs).

Model, per simulated day:

- **Serving.** Fleet of ``serving_replicas`` engines of the serving model S. Requests arrive at
  ``peak_rps * diurnal(t)`` where ``diurnal`` is a cosine between ``trough_fraction`` and 1. A replica's
  SLO capacity (requests/s) is the largest decode batch whose step stays within ``(1 - margin)`` of the TPOT
  target, divided by the time one request spends in it (its prefill plus its output tokens). Idle fraction
  of the fleet at ``t``: ``1 - load(t) / fleet capacity``.
- **Rollout.** A dedicated rollout replica of the policy R finishes ``batch / (turns * (prefill + output *
  step))`` trajectories per second at its batch. A borrowed serving replica gives ``idle * efficiency *
  (its own rollout rate with half the KV)``: the guard's margin and the shared memory are why ``efficiency < 1``.
- **RL job.** Synchronous steps: ``trajectories_per_step`` trajectories are drained at the combined rate
  (the SimPy process advances in ``tick_s`` ticks, so the rate follows the load), then the trainer runs
  ``RooflineTrain.time(tokens)``, then weights go out (a sparse delta of ``delta_fraction`` of the bytes
  crosses into the serving site when it borrows).

The end-to-end speed-up is steps per day with borrowing over steps per day on dedicated replicas only.
It is bounded by Amdahl: only the rollout phase gets faster, by ``1 + borrowed rate / dedicated rate``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Generator
from dataclasses import dataclass

import simpy

from rollarc.cluster.catalogue import GpuSpec, load_catalogue
from rollarc.cluster.engine_cost import RooflineEngine, RooflineTrain
from rollarc.cluster.workload import Efficiency, ModelSpec
from rollarc.rayproc.placement import CATALOGUE

DAY_S = 86400.0


@dataclass(frozen=True)
class Scenario:
    serving_replicas: int = 64
    dedicated_replicas: int = 8
    train_devices: int = 32
    peak_rps: float = 0.0  # 0: size the fleet's peak load at peak_utilisation of its SLO capacity
    peak_utilisation: float = 0.8
    trough_fraction: float = 0.2
    tpot_slo_s: float = 0.05
    margin: float = 0.2
    efficiency: float = 0.7
    serving_prompt: int = 1020  # the Azure conversation trace's medians
    serving_output: int = 129
    turns: int = 4
    rollout_prompt: int = 1024
    rollout_output: int = 512
    trajectories_per_step: int = 4096
    delta_fraction: float = 0.02
    tick_s: float = 60.0


@dataclass(frozen=True)
class Outcome:
    steps_dedicated: int
    steps_harvest: int
    rollout_s_dedicated: float  # mean rollout phase of a step
    rollout_s_harvest: float
    mean_idle: float  # time-averaged idle fraction of the serving fleet
    serving_capacity_rps: float

    @property
    def speedup(self) -> float:
        return self.steps_harvest / self.steps_dedicated if self.steps_dedicated else math.inf

    @property
    def rollout_speedup(self) -> float:
        return self.rollout_s_dedicated / self.rollout_s_harvest if self.rollout_s_harvest else math.inf


def llama_8b() -> ModelSpec:
    return ModelSpec(name="llama-8b", total_params=8.0e9, layers=32, hidden_size=4096, kv_heads=8, head_dim=128)


def qwen_7b() -> ModelSpec:
    return ModelSpec(name="qwen-7b", total_params=7.6e9, layers=28, hidden_size=3584, kv_heads=4, head_dim=128)


def diurnal(t: float, trough_fraction: float) -> float:
    """Load relative to the daily peak: 1 at noon, ``trough_fraction`` at midnight."""
    return trough_fraction + (1 - trough_fraction) * 0.5 * (1 - math.cos(2 * math.pi * t / DAY_S))


def slo_capacity_rps(engine: RooflineEngine, prompt: int, output: int, tpot_s: float) -> float:
    """Requests/s of one replica at the largest batch whose decode step keeps within ``tpot_s``."""
    best = 0.0
    for batch in range(1, engine.max_batch + 1):
        context = batch * (prompt + output / 2)
        if context > engine.kv_capacity_tokens:
            break
        step = engine.decode_cost(batch, context).step()
        if step > tpot_s:
            break
        best = batch / (output * step + engine.prefill_time(prompt))
    return best


def rollout_rate(engine: RooflineEngine, prompt: int, output: int, turns: int, kv_share: float = 1.0) -> float:
    """Trajectories/s of one rollout replica at the largest batch its (share of) KV holds."""
    context_per_seq = prompt + output * turns
    batch = max(1, min(engine.max_batch, int(kv_share * engine.kv_capacity_tokens / context_per_seq)))
    step = engine.decode_cost(batch, batch * context_per_seq / 2).step()
    return batch / (turns * (output * step + engine.prefill_time(prompt)))


def simulate(scenario: Scenario, gpu: GpuSpec, *, days: float = 1.0) -> Outcome:
    eff = Efficiency()
    serving = RooflineEngine(gpu, llama_8b(), 1, eff)
    policy = RooflineEngine(gpu, qwen_7b(), 1, eff)
    trainer = RooflineTrain(gpu, qwen_7b(), scenario.train_devices, eff)
    capacity = slo_capacity_rps(
        serving, scenario.serving_prompt, scenario.serving_output, (1 - scenario.margin) * scenario.tpot_slo_s
    )
    if capacity <= 0:
        raise ValueError(f"{serving.model.name} on {gpu} cannot decode one request within the TPOT target")
    fleet = capacity * scenario.serving_replicas
    peak = scenario.peak_rps or scenario.peak_utilisation * fleet
    dedicated_rate = scenario.dedicated_replicas * rollout_rate(
        policy, scenario.rollout_prompt, scenario.rollout_output, scenario.turns
    )
    lend_rate = (
        scenario.serving_replicas
        * scenario.efficiency
        * rollout_rate(policy, scenario.rollout_prompt, scenario.rollout_output, scenario.turns, kv_share=0.5)
    )
    tokens = scenario.trajectories_per_step * (scenario.rollout_prompt + scenario.turns * scenario.rollout_output)
    train_s = trainer.time(tokens)
    weight_bytes = 2.0 * qwen_7b().total_params
    sync_s = scenario.delta_fraction * weight_bytes / gpu.network_bytes_per_s

    def idle(t: float) -> float:
        return max(0.0, 1.0 - peak * diurnal(t, scenario.trough_fraction) / fleet)

    def job(env: simpy.Environment, borrow: bool, record: list[float]) -> Generator[simpy.events.Event, object, None]:
        while True:
            left = float(scenario.trajectories_per_step)
            started = env.now
            while left > 1e-6:  # not 0: rounding could leave a remainder that never drains
                rate = dedicated_rate + (lend_rate * idle(env.now) if borrow else 0.0)
                dt = min(scenario.tick_s, left / rate)
                yield env.timeout(dt)
                left -= rate * dt
            record.append(env.now - started)
            yield env.timeout(train_s + (sync_s if borrow else 0.0))
            record.append(-1.0)  # a finished step

    results = {}
    for borrow in (False, True):
        env = simpy.Environment()
        record: list[float] = []
        env.process(job(env, borrow, record))
        env.run(until=days * DAY_S)
        rollouts = [r for r in record if r >= 0]
        results[borrow] = (sum(1 for r in record if r < 0), sum(rollouts) / max(1, len(rollouts)))
    samples = 1440
    mean_idle = sum(idle(DAY_S * i / samples) for i in range(samples)) / samples
    return Outcome(results[False][0], results[True][0], results[False][1], results[True][1], mean_idle, capacity)


def main(argv: list[str] | None = None) -> int:
    """Print the speed-up over fleet sizes: ``python -m rollarc.rose.sim_scenario``."""

    parser = argparse.ArgumentParser(prog="python -m rollarc.rose.sim_scenario", description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", default="h800")
    args = parser.parse_args(argv)
    gpu = load_catalogue(CATALOGUE).gpu(args.gpu)
    print("serving replicas / dedicated replicas -> end-to-end speed-up, rollout speed-up, mean idle fraction")
    for ratio in (0.5, 1, 2, 4, 8):
        scenario = Scenario(serving_replicas=int(8 * ratio), dedicated_replicas=8)
        out = simulate(scenario, gpu)
        print(
            f"  {ratio:>5g}: {out.speedup:.2f}x end to end ({out.steps_dedicated} -> {out.steps_harvest} steps/day), "
            f"rollout {out.rollout_speedup:.2f}x, idle {out.mean_idle:.2f}; dedicated step: rollout "
            f"{out.rollout_s_dedicated:.0f} s of {DAY_S / out.steps_dedicated:.0f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
