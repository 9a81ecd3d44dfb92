"""Analytic step time of a placement: the planner's fast model (the simulator is the slow, exact one).

Per rollout pool, the step needs the larger of two times:

- **throughput**: the pool's prefill work plus its decode tokens at the engine's steady batch
  ``b = min(max_batch, KV capacity / KV per turn, turns in flight per engine)``, at the roofline
  iteration time for that batch and the mean context;
- **tail**: the longest trajectory, run alone: its turns' prefills, ``(turns − 1)`` mean responses
  and one response at the quantile ``1 − 1/turns_per_step`` (the expected longest), plus env steps.

Synchronous: ``max(pools, env, reward) + reward tail + train + weight sync + swap``.
Asynchronous with bound ``k``: the phases overlap, so
``max(pool throughputs, env, reward, train, tails / (k + 1)) + swap``: a trajectory may span
``k + 1`` steps, no more (:func:`rollarc.policy.freshness.steps_spanned`, the staleness rule the runtime
and the simulator use). Every cost comes from :mod:`rollarc.cluster.engine_cost`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollarc.cluster import roofline
from rollarc.cluster.catalogue import Catalogue
from rollarc.cluster.engine_cost import RooflineEngine, RooflineReward, RooflineTrain
from rollarc.cluster.workload import TaskProfile, Workload
from rollarc.policy.freshness import steps_spanned


@dataclass(frozen=True)
class Placement:
    """Counts per role, by device kind. ``rollout`` maps a GPU kind to its number of engines."""

    train_kind: str
    train_devices: int
    rollout: dict[str, int]
    task_kind: dict[str, str]
    env_kind: str
    env_nodes: int
    reward_mode: str  # "serverless" | "dedicated"
    reward_kind: str
    reward_replicas: int = 0

    def tp(self, catalogue: Catalogue, workload: Workload, kind: str) -> int:
        eff = workload.efficiency
        return roofline.min_tensor_parallel(catalogue.gpu(kind), workload.model, eff.gpu_memory_utilization)

    def devices(self, catalogue: Catalogue, workload: Workload) -> dict[str, int]:
        used: dict[str, int] = {self.train_kind: self.train_devices, self.env_kind: self.env_nodes}
        for kind, engines in self.rollout.items():
            used[kind] = used.get(kind, 0) + engines * self.tp(catalogue, workload, kind)
        if self.reward_mode == "dedicated":
            used[self.reward_kind] = used.get(self.reward_kind, 0) + self.reward_replicas
        return used


@dataclass(frozen=True)
class Estimate:
    step_time_s: float
    rollout_s: dict[str, float]
    tail_s: float
    env_s: float
    reward_s: float
    train_s: float
    sync_s: float
    trajectories_per_step: int
    tokens_per_step: float

    @property
    def trajectories_per_s(self) -> float:
        return self.trajectories_per_step / self.step_time_s


def _task_numbers(task: TaskProfile, trajectories: int) -> dict[str, float]:
    turns = max(task.turns.mean(), 1.0)
    prompt_tokens = task.first_prompt.mean() + (turns - 1) * task.prompt_tokens.mean()
    response = task.response_tokens.mean()
    context = task.mean_context_tokens()
    per_step_turns = max(trajectories * turns, 1.0)
    return {
        "turns": turns,
        "prompt_tokens": prompt_tokens,
        "response": response,
        "decode_tokens": turns * response,
        "context": context,
        "kv_per_turn": context / 2 + task.prompt_tokens.mean() + response,
        "tail_response": task.response_tokens.quantile(1.0 - 1.0 / per_step_turns),
    }


def estimate(
    placement: Placement,
    catalogue: Catalogue,
    workload: Workload,
    max_staleness: int,
    serverless_cold_start_s: float = 0.0,
    serverless_instances: int = 0,
) -> Estimate:
    eff = workload.efficiency
    model = workload.model
    groups = workload.groups_per_task()
    g = workload.batch.group_size
    train_gpu = catalogue.gpu(placement.train_kind)
    rollout_s: dict[str, float] = {}
    tail = 0.0
    sync_s = swap_s = 0.0
    numbers = {t.name: _task_numbers(t, groups[t.name] * g) for t in workload.tasks}
    for kind, engines in placement.rollout.items():
        tasks = [t for t in workload.tasks if placement.task_kind[t.name] == kind]
        gpu = catalogue.gpu(kind)
        tp = placement.tp(catalogue, workload, kind)
        engine = RooflineEngine(gpu, model, tp, eff)
        trajs = {t.name: groups[t.name] * g for t in tasks}
        total_traj = sum(trajs.values())
        if not tasks or total_traj == 0:
            continue
        prefill_tokens = sum(trajs[t.name] * numbers[t.name]["prompt_tokens"] for t in tasks)
        decode_tokens = sum(trajs[t.name] * numbers[t.name]["decode_tokens"] for t in tasks)
        kv_turn = sum(trajs[t.name] * numbers[t.name]["kv_per_turn"] for t in tasks) / total_traj
        in_flight = total_traj * steps_spanned(max_staleness) / engines
        batch = max(1.0, min(eff.max_batch, engine.kv_capacity_tokens / kv_turn, in_flight))
        per_iter = engine.decode_cost(round(batch), batch * kv_turn).step(0.0)
        prefill = engine.prefill_time(prefill_tokens) / engines
        rollout_s[kind] = prefill + decode_tokens / engines * per_iter / batch
        for t in tasks:
            n = numbers[t.name]
            tail_tokens = (n["turns"] - 1) * n["response"] + n["tail_response"]
            task_tail = (
                engine.prefill_time(n["prompt_tokens"]) + tail_tokens * per_iter + n["turns"] * t.env_latency_s.mean()
            )
            tail = max(tail, task_tail)
        link = min(gpu.network_bytes_per_s, train_gpu.network_bytes_per_s)
        sync_s = max(sync_s, roofline.weight_sync_time(model.weight_bytes, link, tp, eff.sync_latency_s))
        swap_s = max(swap_s, roofline.engine_swap_time(gpu, model.weight_bytes, tp))
    trajectories = sum(groups[t.name] * g for t in workload.tasks)
    env_work = sum(groups[t.name] * g * numbers[t.name]["turns"] * t.env_latency_s.mean() for t in workload.tasks)
    env_s = env_work / (placement.env_nodes * catalogue.cpu(placement.env_kind).cores)
    reward_gpu = catalogue.gpu(placement.reward_kind)
    reward_work = reward_tail = 0.0
    for t in workload.tasks:
        if t.reward.kind == "model" and t.reward.model_params:
            service = RooflineReward(reward_gpu, t.reward.model_params, eff.prefill_mfu).time(
                numbers[t.name]["context"]
            )
            reward_work += groups[t.name] * g * service
            reward_tail = max(reward_tail, service)
        reward_tail = max(reward_tail, t.reward.latency_s.mean())
    servers = placement.reward_replicas if placement.reward_mode == "dedicated" else max(serverless_instances, 1)
    reward_s = reward_work / max(servers, 1)
    if placement.reward_mode == "serverless" and reward_work > 0:
        reward_tail += serverless_cold_start_s
    tokens = sum(groups[t.name] * g * numbers[t.name]["context"] for t in workload.tasks)
    train_s = RooflineTrain(train_gpu, model, placement.train_devices, eff).time(tokens)
    busiest = max([*rollout_s.values(), env_s, reward_s])
    if max_staleness == 0:
        step = max(busiest, tail) + reward_tail + train_s + sync_s + swap_s
    else:
        step = max(busiest, train_s, (tail + reward_tail) / steps_spanned(max_staleness)) + swap_s
    return Estimate(step, rollout_s, tail, env_s, reward_s, train_s, sync_s, trajectories, tokens)
