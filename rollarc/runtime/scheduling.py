"""The runtime's scheduling decisions, with no Ray: the thin adapter the Controller and Router call.

The Controller carries out what :class:`RuntimeScheduling`'s step plan
(:class:`~rollarc.policy.step_plan.StepPlan`: which groups to launch, when to train, sync, evaluate,
checkpoint and stop) decides and reports every finished group to it; the Router actor routes every turn
through the :class:`~rollarc.policy.dispatcher.Dispatcher` that :func:`make_dispatcher` builds (from
:func:`task_pools` and :func:`dedicated_first`). Both are the pure core of :mod:`rollarc.policy`, configured
from the training config here and nowhere else, so a test can replay recorded events through exactly the
core objects the runtime runs (:class:`rollarc.policy.replay.InProcessDriver` over ``RuntimeScheduling.core``
and the Router's dispatcher) and compare the decisions with the simulator's.
"""

from __future__ import annotations

from rollarc.config import Config
from rollarc.policy.dispatcher import BORROWED_POOL, Dispatcher
from rollarc.policy.scheduler import Admission, BatchDecision, DynamicSampling, GroupScheduler
from rollarc.policy.step_plan import Cadence, StepPlan

# A group with fewer usable trajectories has no group-relative advantage: it is dropped, not trained.
MIN_USABLE_TRAJECTORIES = 2


def task_pools(cfg: Config) -> dict[str, str | None]:
    """Each task's preferred rollout pool (None: any), as the Router is told."""
    return {t.name: t.rollout_pool for t in cfg.tasks}


def make_dispatcher(
    task_pools: dict[str, str | None], steal_fraction: float = 0.5, dedicated_first: bool = False
) -> Dispatcher:
    """The Router's routing state: sticky, least loaded in the task's pool, bounded stealing; a lent co-serving
    replica (pool ``borrowed``) never holds more turns than the headroom it last reported, and with
    ``harvest.dedicated_first`` takes only what the dedicated replicas have no place for."""
    return Dispatcher(
        task_pools,
        steal_fraction=steal_fraction,
        dedicated_first=dedicated_first,
        hard_pools=frozenset({BORROWED_POOL}),
    )


def dynamic_sampling(cfg: Config) -> DynamicSampling | None:
    """``train.dynamic_sampling`` as the core takes it (None: off)."""
    ds = cfg.train.dynamic_sampling
    return DynamicSampling(ds.max_drops_per_step, ds.when_exhausted) if ds.enabled else None


def dedicated_first(cfg: Config) -> bool:
    """``harvest.dedicated_first`` (False without ``harvest:``), as the Router is told."""
    return cfg.harvest is not None and cfg.harvest.dedicated_first


class RuntimeScheduling:
    def __init__(self, cfg: Config, *, start_version: int = 0, group_index: int = 0):
        self.core = GroupScheduler(
            cfg.train.groups_per_step,
            cfg.async_.max_staleness,
            {t.name: t.weight for t in cfg.tasks},
            max_overtake=cfg.async_.max_overtake,
            on_stale=cfg.async_.on_stale,
            max_restarts=cfg.async_.max_restarts,
            total_steps=cfg.train.steps,
            start_version=start_version,
            next_group=group_index,
            dynamic_sampling=dynamic_sampling(cfg),
        )
        t = cfg.train
        resize_at = frozenset(change.at_step for change in cfg.elastic)
        cadence = Cadence(t.eval_every, t.checkpoint_every, resize_at, eval_deferred=t.eval_deferred)
        self.plan = StepPlan(self.core, cadence)

    # ---- what the Controller calls --------------------------------------------------------------------
    def admissions(self) -> list[Admission]:
        return self.core.admit_all()

    def group_finished(
        self, group: int, usable_trajectories: int, min_version: int, max_version: int, signal: bool = True
    ) -> bool:
        """Report a finished group (its tokens' version span, whether its rewards differ); False if it is dropped,
        for too few usable trajectories or (dynamic sampling) for all-equal rewards."""
        if usable_trajectories < MIN_USABLE_TRAJECTORIES:
            self.core.fail(group)
            return False
        return self.core.complete(group, min_version, max_version, signal)

    def form_batch(self) -> BatchDecision:
        return self.core.take_batch()

    def weights_published(self, version: int) -> None:
        self.core.publish(version)

    def trainer_lost(self, restored_version: int) -> list[int]:
        """Training goes on from ``restored_version``: the groups admitted and not trained run again first."""
        return self.plan.trainer_lost(restored_version)
