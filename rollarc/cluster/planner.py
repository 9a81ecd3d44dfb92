"""Hardware-affinity planner: a device class and a count for every role and task.

Search:

1. every assignment of a GPU kind to training and to each task's rollouts (all ``kinds^(tasks+1)``
   of them; a homogeneous plan is the assignment with a single kind);
2. for each, a greedy allocation from the smallest feasible placement: repeatedly grow the role
   (training devices, one kind's engines, env nodes; by one unit, 2x, 4x or 16x) whose growth improves
   the objective most per dollar-hour added, within availability and budget, until nothing
   improves it by 0.1%;
3. for a heterogeneous plan, then move one task's rollouts to another kind and climb again, while
   that ends better by 0.1% (the best counts for one assignment can make another one better).

Objectives: ``time`` minimises the predicted step time; ``cost`` minimises dollars per step. Step
times come from :func:`rollarc.cluster.step_estimate.estimate`. Reward models are served serverless
when the cluster offers it, else by dedicated replicas on the training kind.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Literal

from rollarc.cluster import roofline
from rollarc.cluster.catalogue import Catalogue
from rollarc.cluster.fragment import ClusterSpec, PlacementFragment, PoolSpec, RoleSpec, RolesSpec, TaskPlacement
from rollarc.cluster.inventory import Inventory
from rollarc.cluster.step_estimate import Estimate, Placement, estimate
from rollarc.cluster.workload import Workload
from rollarc.config.io import ConfigError

Objective = Literal["time", "cost"]
MAX_ASSIGNMENTS = 4096
TRAIN_QUANTUM = 8  # training starts and grows by whole 8-GPU nodes (where the inventory has that many)


@dataclass(frozen=True)
class Plan:
    placement: Placement
    estimate: Estimate
    price_per_hour: float
    serverless_usd_per_step: float
    homogeneous: bool

    @property
    def cost_per_step_usd(self) -> float:
        return self.price_per_hour * self.estimate.step_time_s / 3600.0 + self.serverless_usd_per_step

    def roles(self, catalogue: Catalogue, workload: Workload) -> list[dict[str, object]]:
        """Rows for display: role, tasks, device, devices (engines × units for rollouts)."""
        p = self.placement
        rows: list[dict[str, object]] = [
            {"role": "train", "tasks": "", "device": p.train_kind, "count": p.train_devices}
        ]
        for kind, engines in p.rollout.items():
            tasks = [t for t, k in p.task_kind.items() if k == kind]
            heavy = {task_class(workload, t) for t in tasks}
            label = "rollout (" + "/".join(sorted(heavy)) + ")"
            rows.append(
                {
                    "role": label,
                    "tasks": ",".join(tasks),
                    "device": kind,
                    "count": engines * p.tp(catalogue, workload, kind),
                }
            )
        rows.append({"role": "env", "tasks": "", "device": p.env_kind, "count": p.env_nodes})
        rows.append(
            {"role": f"reward ({p.reward_mode})", "tasks": "", "device": p.reward_kind, "count": p.reward_replicas}
        )
        return rows

    def fragment(self, catalogue: Catalogue, workload: Workload) -> PlacementFragment:
        """The config fragment ``rollarc train`` accepts: one pool per kind, pool name = kind."""
        p = self.placement
        used = p.devices(catalogue, workload)
        pools = {kind: PoolSpec(count=count, kind=kind) for kind, count in used.items() if count > 0}
        if p.reward_kind not in pools:
            pools[p.reward_kind] = PoolSpec(count=0, kind=p.reward_kind)
        rollout = [
            RoleSpec(pool=kind, replicas=n, units=p.tp(catalogue, workload, kind)) for kind, n in p.rollout.items()
        ]
        roles = RolesSpec(
            train=RoleSpec(pool=p.train_kind, replicas=p.train_devices),
            env=RoleSpec(pool=p.env_kind, replicas=p.env_nodes),
            reward=RoleSpec(pool=p.reward_kind, replicas=p.reward_replicas if p.reward_mode == "dedicated" else 0),
            rollout=rollout,
        )
        tasks = [TaskPlacement(name=t.name, rollout_pool=p.task_kind[t.name]) for t in workload.tasks]
        return PlacementFragment(cluster=ClusterSpec(pools=pools, roles=roles), tasks=tasks)


def task_class(workload: Workload, name: str) -> str:
    """prefill-heavy when a trajectory's prompt tokens outnumber its generated tokens 4:1 or more."""
    t = workload.task(name)
    turns = max(t.turns.mean(), 1.0)
    prompt = t.first_prompt.mean() + (turns - 1) * t.prompt_tokens.mean()
    return "prefill-heavy" if prompt >= 4 * turns * t.response_tokens.mean() else "decode-heavy"


class Planner:
    def __init__(
        self,
        inventory: Inventory,
        catalogue: Catalogue,
        workload: Workload,
        budget_per_hour: float | None = None,
        objective: Objective = "time",
    ):
        self.inv = inventory
        self.cat = catalogue
        self.wl = workload
        self.budget = budget_per_hour
        self.objective = objective
        self.k = workload.batch.max_staleness
        self.gpu_kinds = [k for k, n in inventory.available.items() if n > 0 and catalogue.is_gpu(k)]
        cpus = [k for k, n in inventory.available.items() if n > 0 and not catalogue.is_gpu(k)]
        self.env_kind = min(cpus, key=lambda k: catalogue.cpu(k).price_per_hour / catalogue.cpu(k).cores)
        offer = inventory.serverless
        self.serverless = offer if offer is not None and offer.enabled else None
        self._tp = {k: self._min_tp(k) for k in self.gpu_kinds}

    def _min_tp(self, kind: str) -> int | None:
        try:
            return roofline.min_tensor_parallel(
                self.cat.gpu(kind), self.wl.model, self.wl.efficiency.gpu_memory_utilization
            )
        except ValueError:
            return None

    # -- evaluation --------------------------------------------------------------------------
    def _price(self, p: Placement) -> float:
        return sum(n * self.cat.price_per_hour(kind) for kind, n in p.devices(self.cat, self.wl).items())

    def _serverless_usd(self, est: Estimate) -> float:
        if self.serverless is None or est.reward_s == 0.0:
            return 0.0
        busy_s = est.reward_s * self.serverless.max_instances
        price = self.cat.price_per_hour(self.serverless.device) * self.serverless.price_markup
        return busy_s * price / 3600.0

    def evaluate(self, p: Placement, homogeneous: bool = False) -> Plan:
        offer = self.serverless
        est = estimate(
            p, self.cat, self.wl, self.k, offer.cold_start_s if offer else 0.0, offer.max_instances if offer else 0
        )
        return Plan(p, est, self._price(p), self._serverless_usd(est), homogeneous)

    def _score(self, plan: Plan) -> float:
        return plan.estimate.step_time_s if self.objective == "time" else plan.cost_per_step_usd

    def _better(self, plan: Plan, than: Plan) -> bool:
        """Better objective by more than 0.1%; within that, cheaper per hour (equally fast for less)."""
        a, b = self._score(plan), self._score(than)
        if abs(a - b) > 1e-3 * b:
            return a < b
        return plan.price_per_hour < than.price_per_hour

    def _feasible(self, p: Placement) -> bool:
        used = p.devices(self.cat, self.wl)
        if any(n > self.inv.available.get(kind, 0) for kind, n in used.items()):
            return False
        return self.budget is None or self._price(p) <= self.budget

    # -- search ------------------------------------------------------------------------------
    def _start(self, train_kind: str, task_kind: dict[str, str]) -> Placement | None:
        if self._tp[train_kind] is None or any(self._tp[k] is None for k in task_kind.values()):
            return None
        eff = self.wl.efficiency
        need = roofline.min_train_devices(
            self.cat.gpu(train_kind), self.wl.model, eff.train_bytes_per_param, eff.gpu_memory_utilization
        )
        whole_nodes = math.ceil(need / TRAIN_QUANTUM) * TRAIN_QUANTUM
        train = (
            whole_nodes if whole_nodes <= self.inv.available[train_kind] else need
        )  # a small inventory: no whole node
        rollout = {k: 1 for k in dict.fromkeys(task_kind.values())}
        needs_reward = any(t.reward.kind == "model" for t in self.wl.tasks)
        if self.serverless is not None:
            reward = ("serverless", self.serverless.device, 0)
        else:
            reward = ("dedicated", train_kind, 1 if needs_reward else 0)
        p = Placement(train_kind, train, rollout, task_kind, self.env_kind, 1, *reward)
        if not all(self._fits(t.name, task_kind[t.name]) for t in self.wl.tasks):
            return None
        return p if self._feasible(p) else None

    def _fits(self, task: str, kind: str) -> bool:
        """The task's longest context fits one engine of ``kind``."""
        tp = self._tp[kind]
        if tp is None:
            return False
        capacity = roofline.kv_capacity_tokens(
            self.cat.gpu(kind), self.wl.model, tp, self.wl.efficiency.gpu_memory_utilization
        )
        return self.wl.task(task).max_context_tokens() <= capacity

    def _reassignments(self, p: Placement) -> list[Placement]:
        """Move one task's rollouts to another kind (keeping the engines of kinds still in use, one
        engine for a new kind): the greedy growth fixes each task's kind at its start, and the best
        counts for one assignment can make another assignment better."""
        moves = []
        for task in p.task_kind:
            for kind in self.gpu_kinds:
                if kind == p.task_kind[task] or not self._fits(task, kind):
                    continue
                task_kind = {**p.task_kind, task: kind}
                rollout = {k: n for k, n in p.rollout.items() if k in task_kind.values()}
                rollout.setdefault(kind, 1)
                moves.append(replace(p, task_kind=task_kind, rollout=rollout))
        return moves

    def _moves(self, p: Placement) -> list[Placement]:
        """Grow one role by one quantum, 2x, 4x or 16x: step times have plateaus (a tail that only
        shrinks once the batch per engine does), which single steps cannot cross."""
        moves = []
        for factor in (None, 2, 4, 16):

            def grown(n: int, quantum: int = 1, factor: int | None = factor) -> int:
                return n + quantum if factor is None else max(n * factor, n + quantum)

            moves.append(replace(p, train_devices=grown(p.train_devices, TRAIN_QUANTUM)))
            for kind, n in p.rollout.items():
                moves.append(replace(p, rollout={**p.rollout, kind: grown(n)}))
            moves.append(replace(p, env_nodes=grown(p.env_nodes)))
            if p.reward_mode == "dedicated" and p.reward_replicas:
                moves.append(replace(p, reward_replicas=grown(p.reward_replicas)))
        return [m for m in moves if self._feasible(m)]

    def _grow(self, p: Placement, homogeneous: bool) -> Plan:
        """Climb from ``p``; then, for a heterogeneous plan, move a task to another kind and climb again
        while that ends better (a second phase, so cheap moves never cut the first climb short)."""
        best = self._climb(self.evaluate(p, homogeneous), homogeneous)
        while not homogeneous:
            tries = [
                self._climb(self.evaluate(m), False) for m in self._reassignments(best.placement) if self._feasible(m)
            ]
            better = min(tries, key=self._score, default=None)
            if better is None or self._score(better) >= (1 - 1e-3) * self._score(best):
                return best
            best = better
        return best

    def _climb(self, best: Plan, homogeneous: bool) -> Plan:
        while True:
            candidates = []
            for move in self._moves(best.placement):
                plan = self.evaluate(move, homogeneous)
                gain = self._score(best) - self._score(plan)
                if gain > 1e-3 * self._score(best):
                    candidates.append((gain / max(plan.price_per_hour - best.price_per_hour, 1e-9), plan))
            if not candidates:
                return best
            best = max(candidates, key=lambda c: c[0])[1]

    def plan(self, homogeneous_only: bool = False) -> Plan:
        tasks = [t.name for t in self.wl.tasks]
        n = len(self.gpu_kinds) ** (len(tasks) + 1)
        if n > MAX_ASSIGNMENTS:
            raise ConfigError(
                f"{len(self.gpu_kinds)} GPU kinds and {len(tasks)} tasks make {n} assignments; "
                f"list fewer kinds in available (at most {MAX_ASSIGNMENTS} assignments)"
            )
        best: Plan | None = None
        for train_kind, *kinds in itertools.product(self.gpu_kinds, repeat=len(tasks) + 1):
            homogeneous = len({train_kind, *kinds}) == 1
            if homogeneous_only and not homogeneous:
                continue
            start = self._start(train_kind, dict(zip(tasks, kinds, strict=True)))
            if start is None:
                continue
            plan = self._grow(start, homogeneous)
            if best is None or self._better(plan, best):
                best = plan
        if best is None:
            raise ConfigError(
                "no feasible plan: the model does not fit the available devices, or the budget is below the smallest placement"
            )
        return best
