"""The simulator's scheduling decisions: the runtime's pure core (:mod:`rollarc.policy`), configured from a SimSetup.

The simulator makes no scheduling decision of its own. Groups are admitted, batched and dropped by
the same :class:`~rollarc.policy.scheduler.GroupScheduler` the Ray controller uses (each task's
``groups_per_step`` is its weight in the task mix, so admissions follow the shares exactly), the step
cycle (train, sync, the next batch, the end of the run) is the same
:class:`~rollarc.policy.step_plan.StepPlan` (with no evaluation or checkpoint to take), and
every turn is routed by the same :class:`~rollarc.policy.dispatcher.Dispatcher` the Router uses
(a replica's capacity is its engine's ``max_batch``, as the runtime's is ``engine.max_num_seqs``).
Routing ``random`` is the task-oblivious baseline: no task has a preferred pool.
"""

from __future__ import annotations

from rollarc.policy.dispatcher import Dispatcher
from rollarc.policy.routing import Route
from rollarc.policy.scheduler import Admission, Batch, BatchDecision, GroupScheduler
from rollarc.policy.step_plan import Cadence, StepPlan
from rollarc.sim.setup import SimSetup


def engine_names(setup: SimSetup) -> dict[str, list[str]]:
    """The engine (replica) names of each rollout pool."""
    return {pool.name: [f"{pool.name}-{i}" for i in range(pool.engines)] for pool in setup.rollout}


class SimScheduling:
    def __init__(self, setup: SimSetup):
        weights = {t.name: float(t.groups_per_step) for t in setup.tasks if t.groups_per_step > 0}
        self.core = GroupScheduler(
            setup.groups_per_step,
            setup.max_staleness,
            weights,
            max_overtake=setup.max_overtake,
            on_stale="drop",
            total_steps=setup.steps,
            dynamic_sampling=setup.dynamic_sampling,
        )
        self.plan = StepPlan(self.core, Cadence(bookends=False))
        affinity = setup.routing == "affinity"
        self.dispatcher = Dispatcher({t.name: t.rollout_pool if affinity else None for t in setup.tasks})
        names = engine_names(setup)
        for pool in setup.rollout:
            for name in names[pool.name]:
                self.dispatcher.add_replica(name, pool.name, pool.cost.max_batch)
        self._turns: dict[str, Route] = {}

    # ---- what the Simulation calls ------------------------------------------------------------------
    def admissions(self) -> list[Admission]:
        return self.core.admit_all()

    def group_done(self, group: int, min_version: int, max_version: int, signal: bool = True) -> None:
        self.core.complete(group, min_version, max_version, signal)

    def take_batch(self) -> BatchDecision:
        return self.core.take_batch()

    def weights_published(self, version: int) -> None:
        self.core.publish(version)

    def turn_starts(self, trajectory: str, task: str) -> str:
        route = self.dispatcher.start_turn(trajectory, task)
        self._turns[trajectory] = route
        return route.replica

    def turn_ends(self, trajectory: str) -> None:
        self.dispatcher.finish_turn(self._turns.pop(trajectory))

    def trajectory_ends(self, trajectory: str) -> None:
        self.dispatcher.release(trajectory)

    # ---- the replay driver (rollarc.policy.replay.SchedulingDriver) -----------------------------------
    def trainer_free(self) -> Batch | None:
        return self.take_batch().batch
