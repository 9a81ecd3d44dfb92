"""The Controller: the step loop that admits groups, forms batches, trains, syncs and checkpoints.

One loop serves synchronous and asynchronous training. Every decision is the pure core's
(:mod:`rollarc.policy`, through :class:`~rollarc.runtime.scheduling.RuntimeScheduling`, the same core
the simulator runs): groups are admitted under the staleness bound (``k = 0`` gives the synchronous
barrier), finished groups wait in its bounded buffer, a training step starts as soon as ``B`` fresh
groups are ready, and after each step the new weights are published once and synced to every rollout
replica; the step plan (:class:`~rollarc.policy.step_plan.StepPlan`) says when each of these happens and
when to evaluate, checkpoint, resize and stop. The loop here only carries out its actions and reports back
what the Ray actors did. Rollout never waits for training except through the admission rule.

Everything that can go wrong with one trajectory or one worker is counted and survived: failed
trajectories, dropped or restarted stale groups, dead EnvWorkers (replaced; their groups re-run, at most
``async.max_group_retries`` times each), dead rollout replicas or their engines (the router fails over, and a new
replica replaces the dead one), a dead router (Ray restarts it; the replicas are registered again) and a dead
trainer (a new one resumes from the last checkpoint, at most ``train.max_trainer_restarts`` times; the steps since
then are redone and counted as ``steps_lost``). Every started trajectory is
accounted for (:class:`TrajectoryAccount`). What cannot be survived (a NaN loss or reward, every rollout
replica dead, every trajectory failing) stops the run with a clear message; the last good checkpoint stays
on disk.

One concept, although over 500 lines: the executor of the plan's actions over one shared state, the step in
flight (groups pending on EnvWorkers, the buffer, the admitted specs, the train, publish and sync refs).
Submitting a group, reading its result, recovering a lost trainer and checkpointing each read and change that
state together, so they stay in one class. What does not touch it lives beside it: held-out evaluation
(``heldout_eval.py``), the step's metrics record (``step_report.py``), the caps past which the run stops
(``run_limits.py``), the errors (``run_errors.py``), the counters, the scheduling adapter and the span cadence.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, assert_never

import ray
from ray.exceptions import RayActorError, RayTaskError

from rollarc.agent.composition import Group
from rollarc.agent.seeds import derived_seed
from rollarc.config import Config, elastic_pool
from rollarc.engine.types import EngineDeadError
from rollarc.models.checkpoint import remove_partial_directories
from rollarc.models.checkpoint_retention import prune_checkpoints
from rollarc.models.checkpoint_write import DiskFull
from rollarc.policy.scheduler import Admission, Batch, NoSignalError, ReadyGroup
from rollarc.policy.step_plan import (
    Action,
    CancelInFlight,
    Checkpoint,
    DropStale,
    Evaluate,
    Finish,
    Launch,
    Resize,
    StepDone,
    StepPlan,
    Sync,
    Train,
)
from rollarc.rayproc.deadline import hung
from rollarc.report.metrics import MetricsWriter, TimelineWriter
from rollarc.report.progress import RunProgress
from rollarc.report.run_dir import (
    TASK_PROFILES,
    TaskProfiles,
    finished_signal_share,
    from_dict,
    read_metrics,
    rl_gain_points,
    signal_fraction,
    to_dict,
    truncate_timeline,
    write_json,
)
from rollarc.runtime import heldout_eval
from rollarc.runtime.deferred_eval import DeferredEvals
from rollarc.runtime.env_worker import GroupResult, GroupSpec
from rollarc.runtime.failure_window import FailureWindow
from rollarc.runtime.harvest_pool import HarvestPool
from rollarc.runtime.ray_cluster import pinned_driver
from rollarc.runtime.run_counters import Counters
from rollarc.runtime.run_errors import (
    RunError as RunError,  # re-exported: entry.py imports it here
)
from rollarc.runtime.run_errors import (
    TrainerLost,
    remote_cause,
)
from rollarc.runtime.run_limits import (
    check_failed_fraction,
    check_group_retries,
    check_replicas_left,
    check_stuck_threads,
    check_trainer_restarts,
)
from rollarc.runtime.scheduling import RuntimeScheduling
from rollarc.runtime.span_cadence import Collect, SpanCadence
from rollarc.runtime.step_report import batch_info, mean_dicts, since_step_info, step_record
from rollarc.runtime.task_profile import TaskProfiler
from rollarc.runtime.trajectory_accounting import TrajectoryAccount
from rollarc.runtime.weight_sync import SyncPayload
from rollarc.runtime.workers import Workers

REPLACEMENT_WAIT_S = 60.0  # how long a turn waits for a replacement when the last rollout replica died


class Controller:
    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        workers: Workers,
        *,
        start_version: int = 0,
        group_index: int = 0,
        run_start: float | None = None,
        metrics: MetricsWriter | None = None,
    ):
        self.cfg = cfg
        self.run_dir = run_dir
        self.workers = workers
        self.B = cfg.train.groups_per_step
        self.G = cfg.train.group_size
        self.scheduling = RuntimeScheduling(cfg, start_version=start_version, group_index=group_index)
        self.start_version = start_version
        self.group_index = group_index
        self.counters = Counters()
        self.pending: dict[Any, tuple[GroupSpec, str]] = {}
        self.submitted_at: dict[Any, float] = {}  # pending group -> when it was sent (its deadline, _check_deadlines)
        self.specs: dict[int, GroupSpec] = {}  # admitted, not yet trained or dropped: a restart re-runs its spec
        self.finished: dict[int, GroupResult] = {}  # in the scheduler's buffer, by group index
        self.run_start = run_start or time.time()
        self.metrics = metrics or MetricsWriter(run_dir, tensorboard=cfg.run.tensorboard)
        self.timeline = TimelineWriter(run_dir, self.run_start)
        self.evals: list[dict[str, Any]] = []
        self.last_checkpoint: str | None = None
        self.sync_times: list[dict[str, float]] = []
        self._sync_bytes = 0  # received by the dedicated replicas since the last step record
        self.env_rss: dict[str, float] = {}
        self.env_router_resends: dict[str, int] = {}  # each EnvWorker's count (turns resent after a router death)
        self.profiler = TaskProfiler()
        self.trained_groups: set[str] = set()
        self.dropped_by_task: Counter[str] = Counter()
        self.stale_since_step: list[GroupResult] = []  # dropped or restarted as stale since the last batch
        self.finished_since_step: list[Group] = []  # every admitted group whose rollouts ended, since the last batch
        self.cancelled_since_step: list[Group] = []  # admitted groups cancelled while running, since the last batch
        self.cancelled_by_task: Counter[str] = Counter()
        self.trajectories = TrajectoryAccount()
        self.last_checkpoint_version: int | None = None
        self.trainer_restarts = 0
        # group index -> how many EnvWorker deaths it was on (async.max_group_retries)
        self.group_deaths: Counter[int] = Counter()
        self.steps_lost = 0
        self._last_heal = time.time()
        self.elastic_events: list[dict[str, Any]] = []
        # One step's worth of started rollouts: B × (G + r).
        self.failures = FailureWindow(self.B * (self.G + cfg.async_.redundancy), cfg.async_.max_failed_fraction)
        self.resumed_rl_start_s: float | None = None  # set by restore(): the RL window's start on the run clock
        self.harvest = (
            HarvestPool(cfg, workers.router, workers.trainer, workers.policy_dir, start_version, run_dir=run_dir)
            if cfg.harvest is not None
            else None
        )
        self._sync_targets: dict[Any, str] = {}  # sync ref -> the dedicated replica it updates
        # the step in flight, as the plan's actions started it
        self._train_ref: ray.ObjectRef[dict[str, Any]] | None = None
        self._publish_ref: ray.ObjectRef[SyncPayload] | None = None
        self._sync_refs: list[Any] = []
        self._payload: SyncPayload | None = None
        self._train_stats: dict[str, Any] = {}
        self._batch_stats: dict[str, Any] = {}
        self._step_started = self._sync_started = self._synced_at = self._last_step_end = time.time()
        self._trained_at = self._step_started
        self.progress: RunProgress | None = None
        # train.eval_deferred: the step evaluations' snapshots, scored at checkpoints (deferred_eval.py)
        deferred = cfg.train.eval_deferred and cfg.train.eval_episodes > 0
        self.deferred = DeferredEvals(cfg, workers.policy_dir, workers.deadlines) if deferred else None

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's controller state exactly: counters, evaluations, task profiles, the run
        clock and the groups that were started but not trained (they are run again, same seeds; docs/async.md).

        The run clock goes on from the checkpoint's ``wall_s``: spans that the stopped run wrote after that
        time describe work that is redone now, so the timeline drops them and continues without a gap.
        """
        self.counters = Counters.from_dict(state.get("counters", {}))
        self.evals = list(state.get("evals", []))
        if "task_profiler" in state:
            self.profiler = TaskProfiler.from_state(state["task_profiler"])
        self.dropped_by_task = Counter({str(k): int(v) for k, v in state.get("dropped_by_task", {}).items()})
        self.plan.buffer_peak = int(state.get("max_buffer_groups", 0))
        for saved in state.get("unfinished_groups", []):
            spec = GroupSpec(**saved)
            self.specs[spec.index] = spec  # run again first, same seeds (docs/async.md)
            self.scheduling.core.requeue(spec.index, spec.task)
        clock = float(state["wall_s"])
        self.run_start = time.time() - clock
        self.timeline.close()
        truncate_timeline(self.run_dir, clock)
        self.timeline = TimelineWriter(self.run_dir, self.run_start)
        self.resumed_rl_start_s = state.get("rl_start_s")

    # ---- the loop --------------------------------------------------------------------------------------
    @property
    def plan(self) -> StepPlan:
        return self.scheduling.plan

    @property
    def version(self) -> int:
        """The version every rollout replica serves."""
        return self.plan.version

    def run(self) -> dict[str, Any]:
        """Carry out the step plan's actions and report to it what the actors did, until the run is complete.

        Every decision (which groups start, when a batch trains, when the version moves on, when to evaluate,
        checkpoint, resize and stop) is the plan's (:mod:`rollarc.policy.step_plan`); this loop only waits on Ray.
        """
        self._execute(self.plan.start(evaluated=bool(self.evals)))  # the evaluation before RL, unless resumed
        self._step_started = self._last_step_end = time.time()
        self.workers.supervise(REPLACEMENT_WAIT_S)  # from now on a dead replica is replaced, not fatal
        self.rl_start = self.rl_end = time.time()
        if self.resumed_rl_start_s is not None:
            self.rl_start = self.run_start + self.resumed_rl_start_s
        spans = SpanCadence(synchronous=self.cfg.async_.mode == "sync", last_s=time.time())
        with RunProgress(self.cfg.train.steps, enabled=self.cfg.run.progress) as progress:
            self.progress = progress
            progress.update(self.version, success=self.evals[-1]["success"])
            while not self.plan.done:
                try:
                    self._drain()
                    if self.plan.done:
                        break
                    for ref in self._wait():
                        self._on_ref(ref)
                    self._drain()
                except TrainerLost:
                    self._recover_trainer(self.version)
                    progress.update(self.version)
                    continue
                if self.plan.done:
                    break
                if not self.plan.moving_weights:
                    self._heal()  # a replacement catches up to the published version (none is being published)
                self._collect_spans_when_due(spans)
        self.collect_spans()
        return self.summary(self.version)

    def _wait(self) -> list[Any]:
        """The refs that are ready now: finished groups, the step, its published weights, finished syncs."""
        # the publish is read once the step is: it cannot finish first, and waiting on it alone could spin
        publishing = self._publish_ref if self._train_ref is None else None
        refs = list(self.pending) + [r for r in (self._train_ref, publishing) if r is not None] + self._sync_refs
        wait_s = 1.0 if self.harvest is None else min(1.0, self.harvest.harvest.poll_s)
        done, _ = ray.wait(refs, num_returns=1, timeout=wait_s)
        if done and len(refs) > 1:  # everything else ready now too: one pass, not one loop turn per ref
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if self.harvest is not None:
            self.harvest.tick()
        self._check_deadlines(set(done))
        return done

    def _check_deadlines(self, ready: set[Any]) -> None:
        """A step, its publish or a weight sync still running past ``cluster.train_timeout_s`` is a hung actor; so is
        a group past its own deadline. Refs already ``ready`` are answers, however late this loop reads them (it may
        have been busy with an evaluation, a checkpoint or a recovery)."""
        deadlines = self.workers.deadlines
        if self._train_ref is not None and self._train_ref not in ready:
            deadlines.check("train", self._step_started, "the trainer", f"train_step of step {self.version + 1}")
        elif self._publish_ref is not None and self._publish_ref not in ready:
            deadlines.check("train", self._trained_at, "the trainer", "publish")
        waiting = [ref for ref in self._sync_refs if ref not in ready]
        if waiting:
            late = ", ".join(self._sync_targets.get(ref, "a borrowed replica") for ref in waiting)
            deadlines.check("train", self._sync_started, late, "update_weights")
        # a group's trajectories each end within async.trajectory_timeout_s, so its EnvWorker answers within that
        # plus a control call's deadline, unless it hangs whole (an event loop blocked by env or plugin code)
        group_s = self.cfg.async_.trajectory_timeout_s + deadlines.call_s
        now = time.time()
        for ref, (spec, worker) in self.pending.items():
            if ref not in ready and now - self.submitted_at.get(ref, now) > group_s:
                raise hung(
                    f"EnvWorker {worker}",
                    f"run_group of group {spec.index} (task {spec.task}, seed {spec.seed})",
                    group_s,
                    "async.trajectory_timeout_s + cluster.call_timeout_s",
                )

    def _on_ref(self, ref: Any) -> None:
        """Report what one ready ref says to the plan (a finished group goes to the scheduler)."""
        if ref in self.pending:
            self._on_group(ref)
        elif ref is self._train_ref:
            self._train_ref = None
            self._trained_at = time.time()  # the publish queued behind the step starts now
            self._train_stats = self._get_train(ref, self.version)
            self.plan.trained()
        elif self._publish_ref is not None and ref is self._publish_ref:
            self._payload = self._get_publish(ref)
            self._publish_ref = None
            self.plan.published()
        elif ref in self._sync_refs:
            self._sync_refs.remove(ref)
            if self.harvest is not None and self.harvest.owns(ref):
                self.harvest.on_sync(ref)
            else:
                self._get_sync(ref)
            if not self._sync_refs:
                self._synced_at = time.time()
                self.plan.synced()

    def _drain(self) -> None:
        """Carry out everything the plan decides now."""
        while actions := self.plan.schedule():
            self._execute(actions)

    def _execute(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Launch():
                    self._launch(action.admissions)
                case DropStale():
                    self._drop_stale(action.group, action.restart)
                case Train():
                    self._start_step(action.batch)
                case Sync():
                    self._sync(action.version)
                case StepDone():
                    self._step_done(action.version, action.evaluate)
                case Evaluate():
                    self.evals.append(self.evaluate(action.version, label=action.label))
                case Checkpoint():
                    try:
                        self.checkpoint(action.version, final=action.final)
                    except TrainerLost:
                        if action.final:  # the evaluation after RL goes: the steps since the last checkpoint are redone
                            self.evals.pop()
                        raise
                case Resize():
                    self._apply_elastic(action.version)
                case CancelInFlight():
                    self._cancel_pending()
                case Finish():
                    pass  # the plan is done: the loop ends
                case _:
                    assert_never(action)

    # ---- admission and batches -------------------------------------------------------------------
    def _launch(self, admissions: tuple[Admission, ...]) -> None:
        specs = [
            self._restart_spec(admission) if admission.restart else self._new_spec(admission)
            for admission in admissions
        ]
        if self.cfg.async_.mode == "sync" and len(specs) > 1:
            self._submit_together(specs)
        else:
            for spec in specs:
                self._submit(spec)

    def _new_spec(self, admission: Admission) -> GroupSpec:
        index, task = admission.group, admission.task
        self.group_index = index + 1
        sampling_seed = _seed_of(self.cfg.seed, "sampling", index)
        return GroupSpec(
            group_id=f"g{index}",
            index=index,
            task=task,
            seed=self.cfg.train.seed_base + index,
            size=self.G,
            redundancy=self.cfg.async_.redundancy,
            sampling_seed=sampling_seed,
            step=self.scheduling.core.published_version,
            keep=self.cfg.async_.redundancy_keep,
        )

    def _restart_spec(self, admission: Admission) -> GroupSpec:
        """A group run again: the same spec after a lost trainer or a resume, fresh sampling seeds after a
        stale restart (the same seeds would draw the same slow episode and latencies again)."""
        spec = self.specs[admission.group]
        if admission.attempt == spec.attempt:
            return spec
        purpose = f"sampling-restart-{admission.attempt}"
        return replace(
            spec,
            attempt=admission.attempt,
            sampling_seed=_seed_of(self.cfg.seed, purpose, spec.index),
            step=self.scheduling.core.published_version,
        )

    def _submit_together(self, specs: list[GroupSpec]) -> None:
        """Synchronous mode: the groups admitted together go to each EnvWorker in one call.

        The barrier needs every one of them before the step, so nothing waits for their results coming back
        together; what it saves is the groups reaching the EnvWorker one call at a time, each starting its
        turns a little later than the one before (their first turns then reach the engine in several
        batches, and the last batch finishes last).
        """
        by_worker: dict[str, list[GroupSpec]] = {}
        load = list(self.pending.values())
        for spec in specs:
            name = self.workers.least_loaded_env(load)
            load.append((spec, name))
            by_worker.setdefault(name, []).append(spec)
        for name, chunk in by_worker.items():
            worker = self.workers.env[name]
            refs = (
                worker.run_groups.options(num_returns=len(chunk)).remote(chunk)
                if len(chunk) > 1
                else [worker.run_group.remote(chunk[0])]
            )
            for spec, ref in zip(chunk, refs, strict=True):
                self.specs[spec.index] = spec
                self.pending[ref] = (spec, name)
                self.submitted_at[ref] = time.time()
                self.trajectories.start(ref, spec.size + spec.redundancy)
                self.counters.groups_started += 1

    def _submit(self, spec: GroupSpec) -> None:
        self.specs[spec.index] = spec
        name = self.workers.least_loaded_env(self.pending.values())
        ref = self.workers.env[name].run_group.remote(spec)
        self.pending[ref] = (spec, name)
        self.submitted_at[ref] = time.time()
        self.trajectories.start(ref, spec.size + spec.redundancy)
        self.counters.groups_started += 1

    def _on_group(self, ref: Any) -> None:
        spec, worker = self.pending.pop(ref)
        self.submitted_at.pop(ref, None)
        try:
            result: GroupResult = self.workers.deadlines.get("call", ref, worker, "run_group")  # ready
        except RayActorError:
            # The EnvWorker died: replace it and run the group again elsewhere (same seed), up to the cap.
            self.trajectories.retry(ref)
            if worker in self.workers.env:  # several of its groups report its death; replace it once
                self.workers.replace_env(worker)
                self.counters.env_worker_restarts += 1
            self.group_deaths[spec.index] += 1
            check_group_retries(
                spec, self.group_deaths[spec.index], self.cfg.async_.max_group_retries, self.last_checkpoint
            )
            self.counters.retried_groups += 1
            self._submit(spec)
            return
        except RayTaskError as err:  # not a trajectory's failure (those are counted): the EnvWorker itself raised
            raise RunError(
                f"group {spec.index} of task {spec.task} (seed {spec.seed}) failed in {worker}: {remote_cause(err)}. "
                f"The last good checkpoint is {self.last_checkpoint or '(none yet)'}"
            ) from None
        self.trajectories.close(
            ref,
            done=len(result.trajectories),
            failed=len(result.failed),
            cancelled=result.cancelled,
            dropped=result.dropped,
        )
        self.env_rss[result.worker] = result.rss_mb
        self.env_router_resends[result.worker] = result.router_resends
        check_stuck_threads(result, self.cfg.async_.max_stuck_env_threads, self.last_checkpoint)
        self.finished_since_step.append((spec.task, result.trajectories))
        for traj in [*result.trajectories, *result.failed]:
            self.profiler.add(traj)
        for traj in result.failed:
            self.counters.failed_trajectories += 1
            self.counters.failures.add(traj)
        self.failures.add(ok=len(result.trajectories) + result.dropped, failed=len(result.failed))
        signal = len({t.reward for t in result.trajectories}) > 1
        core = self.scheduling.core.counts
        dropped_no_signal, kept_no_signal = core.dropped_no_signal, core.kept_no_signal
        try:
            kept = self.scheduling.group_finished(
                spec.index, len(result.trajectories), result.min_version, result.max_version, signal
            )
        except NoSignalError as err:
            raise RunError(
                f"{err}; train.dynamic_sampling.when_exhausted is 'stop'. The last good checkpoint is "
                f"{self.last_checkpoint or '(none yet)'}"
            ) from None
        self.counters.dropped_no_signal += core.dropped_no_signal - dropped_no_signal
        self.counters.kept_no_signal += core.kept_no_signal - kept_no_signal
        if not kept:
            self.specs.pop(spec.index, None)
            self.dropped_by_task[spec.task] += 1
            if core.dropped_no_signal == dropped_no_signal:
                self.counters.dropped_failed += 1
            check_replicas_left(result, self.workers.alive_rollouts)
        else:
            self.finished[spec.index] = result
        check_failed_fraction(self.failures, self.counters.failures)

    def _drop_stale(self, stale: ReadyGroup, restart: bool) -> None:
        """A finished group with no fresh token leaves the buffer: queued to run again, or dropped."""
        dropped = self.finished.pop(stale.group)
        if restart:
            self.counters.restarted_stale += 1
        else:
            self.specs.pop(stale.group, None)
            self.counters.dropped_stale += 1
            self.dropped_by_task[stale.task] += 1
        self.stale_since_step.append(dropped)

    def _start_step(self, taken: Batch) -> None:
        """Train one step on the plan's batch; its weights are published right behind it on the trainer."""
        batch = [self.finished.pop(g.group) for g in taken.groups]
        for group in taken.groups:
            self.specs.pop(group.group, None)
        ids = [g.spec.group_id for g in batch]
        if len(set(ids)) != len(ids) or self.trained_groups.intersection(ids):
            raise RunError(
                f"internal error: a group would be trained twice ({ids}); stopping rather than "
                "training on duplicated data"
            )
        self.trained_groups.update(ids)
        self.counters.groups_trained += len(batch)
        self._step_started = time.time()
        since = since_step_info(self.stale_since_step, self.finished_since_step, self.cancelled_since_step)
        self.stale_since_step, self.finished_since_step, self.cancelled_since_step = [], [], []
        self._batch_stats = batch_info(batch, taken.train_version, since)
        trainer = self.workers.trainer
        self._train_ref = trainer.train_step.remote([g.trajectories for g in batch], taken.train_version)
        # Queued behind the step on the trainer (its calls run in order), so the new weights are published without
        # waiting for a round trip through this loop; it is read after the step.
        self._publish_ref = trainer.publish.remote()

    def _sync(self, version: int) -> None:
        """The published weights of ``version`` to every dedicated replica, then one update per borrowed site."""
        assert self._payload is not None  # read from the trainer just before the plan asked for this sync
        self._sync_refs = self.workers.sync_all(self._payload)
        if self.workers.handoff is None:  # which replica each ref updates: one whose engine died is named
            self._sync_targets = dict(zip(self._sync_refs, self.workers.sync_targets(), strict=True))
        if self.harvest is not None:
            self._sync_refs += self.harvest.sync(self._payload)
        self._sync_started = time.time()

    def _step_done(self, version: int, evaluate: bool) -> None:
        """Every replica serves ``version``: the step's record (with a held-out evaluation when due) and progress."""
        now = self._synced_at
        sync_bytes, self._sync_bytes = self._sync_bytes, 0
        record = step_record(
            version,
            self._train_stats,
            self._batch_stats,
            now - self._last_step_end,
            now - self._sync_started,
            now - self._step_started,
            run_start=self.run_start,
            sync_bytes=sync_bytes,
            buffer_groups=len(self.finished),
            in_flight_groups=len(self.pending),
            rollout_rss=[t.get("rss_mb", 0.0) for t in self.sync_times[-len(self.workers.rollout) :]],
            env_rss=list(self.env_rss.values()),
            counters=self.counters,
        )
        if self.harvest is not None:
            record.update(self.harvest.step_metrics())
        self._last_step_end = self.rl_end = now
        if evaluate and self.deferred is not None:
            try:
                self.deferred.snapshot(self.workers.trainer, version, record["wall_s"])
            except RayActorError:
                raise TrainerLost(f"the trainer died before step {version}'s weights were snapshotted") from None
        elif evaluate:
            evaluation = self.evaluate(version, label=f"step_{version}")
            self.evals.append(evaluation)
            record["heldout_success"] = evaluation["success"]
        self.metrics.log(version, record)
        if self.progress is not None:
            self.progress.update(
                version,
                success=record["success"],
                reward=record["reward"],
                tok_s=record["gen_tok_s"],
                staleness=record["staleness_max"],
            )

    # ---- training and sync results ---------------------------------------------------------------
    def _get_train(self, ref: Any, version: int) -> dict[str, Any]:
        try:
            return self.workers.deadlines.get("call", ref, "the trainer", "train_step")  # ready
        except RayActorError:
            raise TrainerLost(f"the trainer died during step {version + 1}") from None
        except RayTaskError as err:
            raise RunError(
                f"training step {version + 1} was refused: {err.cause if hasattr(err, 'cause') else err}. "
                f"The last good checkpoint is {self.last_checkpoint or '(none yet)'}"
            ) from None

    def _get_publish(self, ref: Any) -> SyncPayload:
        try:
            return self.workers.deadlines.get("call", ref, "the trainer", "publish")  # ready
        except RayActorError:
            raise TrainerLost("the trainer died while publishing weights") from None

    def _get_sync(self, ref: Any) -> None:
        try:
            replica = self._sync_targets.get(ref, "a rollout replica")
            self.sync_times.append(self.workers.deadlines.get("call", ref, replica, "update_weights"))  # ready
            self._sync_bytes += int(self.sync_times[-1]["bytes"])
            target = self._sync_targets.pop(ref, None)
            if self.harvest is not None and target is not None:
                self.harvest.note_dedicated(target, self.sync_times[-1]["bytes"])
        except EngineDeadError:  # (before RayTaskError, its base) a replica whose engine died: heal replaces it
            target = self._sync_targets.pop(ref, None)
            if target is not None:
                self.workers.mark_dead_rollout(target)
            if not self.workers.alive_rollouts():
                raise RunError("every rollout worker died; no replica is left to generate") from None
        except RayTaskError as err:  # e.g. an external server refused to reload: serving on would mislabel versions
            if not self._trainer_alive():  # the published weights lived in the dead trainer's object store
                raise TrainerLost("the trainer died while its weights were being synced") from None
            raise RunError(f"weight sync failed: {err.cause if hasattr(err, 'cause') else err}") from None
        except RayActorError:
            self.workers.note_dead_rollout()
            if not self.workers.alive_rollouts():
                raise RunError("every rollout worker died; no replica is left to generate") from None

    # ---- lost actors ------------------------------------------------------------------------------
    def _trainer_alive(self) -> bool:
        try:
            self.workers.deadlines.get("call", self.workers.trainer.version.remote(), "the trainer", "version")
        except RayActorError:
            return False
        return True

    def _recover_trainer(self, version: int) -> int:
        """A new trainer from the last checkpoint; returns the version training goes on from.

        Groups in flight or buffered may hold tokens of the lost versions, whose weights no longer exist: they
        are cancelled and the scheduler runs them again first (same seeds, ``self.specs``) under the restored
        weights, so version labels stay exact. Groups trained in the lost steps are not run again (their ids
        are trained once); new groups take their place. A trainer that dies again while it is being restored is
        one more loss; past ``train.max_trainer_restarts`` losses the run stops.
        """
        check_trainer_restarts(self.trainer_restarts, self.cfg.train.max_trainer_restarts, self.last_checkpoint)
        unsupported = (
            "rollout.backend: openai"
            if self.workers.handoff is not None
            else "FSDP training"
            if self.cfg.cluster.roles.train.replicas > 1 or self.cfg.train.fsdp.on_one_replica
            else None
        )
        if unsupported is not None:
            raise RunError(
                f"the trainer was lost, and recovering it in-process is not supported with {unsupported}; "
                f"resume from {self.last_checkpoint or 'the start'}"
            )
        if self.last_checkpoint is not None:
            checkpoint: str | None = self.last_checkpoint
            restored = self.last_checkpoint_version or 0
        elif self.start_version > 0:  # resumed, no checkpoint written since: the one resumed from
            checkpoint, restored = (
                str(self.run_dir / "checkpoints" / f"step_{self.start_version:06d}"),
                self.start_version,
            )
        else:
            checkpoint, restored = None, 0
        remove_partial_directories(self.run_dir / "checkpoints")  # a save the trainer died in
        policy_dir = str(Path(checkpoint) / "policy") if checkpoint is not None else self.workers.policy_dir
        self._cancel_pending()
        self.finished.clear()
        # evaluations of the lost steps go with them (they are redone and evaluated again)
        self.evals = [e for e in self.evals if int(e["version"]) <= restored]
        if self.deferred is not None:
            self.deferred.discard()
        restart = self.scheduling.trainer_lost(restored)  # the plan goes back to ``restored``, its step gone
        self._train_ref, self._publish_ref, self._sync_refs, self._payload = None, None, [], None
        if set(restart) != set(self.specs):
            raise RunError(
                f"internal error: groups to run again {restart} differ from those admitted {sorted(self.specs)}"
            )
        while True:
            try:
                self.workers.restart_from(policy_dir, checkpoint, restored)
                break
            except RayActorError:  # the new trainer died too, before it trained anything: another loss
                self.trainer_restarts += 1
                check_trainer_restarts(self.trainer_restarts, self.cfg.train.max_trainer_restarts, self.last_checkpoint)
        if self.harvest is not None:  # the borrowed site too: new replicas at the restored weights, the new trainer
            self.harvest.restart_from(policy_dir, self.workers.trainer, restored)
        self.steps_lost += version - restored
        self.trainer_restarts += 1
        self.counters.retried_groups += len(restart)
        return restored

    def _heal(self) -> None:
        """Every few seconds: a restarted router gets its replicas back; dead rollout replicas are replaced."""
        if time.time() - self._last_heal < 2.0:
            return
        self._last_heal = time.time()
        self.workers.heal(self.version, self.harvest.registrations() if self.harvest is not None else ())

    # ---- per-step bookkeeping --------------------------------------------------------------------
    def _apply_elastic(self, version: int) -> None:
        """The ``elastic`` schedule: between steps (no train, publish or sync in flight), add or remove replicas."""
        for change in self.cfg.elastic:
            if change.at_step != version:
                continue
            pool = elastic_pool(change, self.cfg.cluster)
            group = next(g for g in self.cfg.cluster.roles.rollout if g.pool == pool)
            event: dict[str, Any] = {"step": version, "pool": pool, "added": [], "removed": []}
            for _ in range(change.add):
                name = self.workers.next_rollout_name()
                self.workers.add_rollout(name, group, version, catch_up=True)
                event["added"].append(name)
            for name in list(reversed(self.workers.rollouts_of_pool(pool)))[: change.remove]:
                outcome = self.workers.remove_rollout(name, change.drain_timeout_s)
                event["removed"].append({"name": name, **outcome})
            self.elastic_events.append(event)

    # ---- evaluation, checkpoints, spans ----------------------------------------------------------
    def evaluate(self, version: int, label: str) -> dict[str, Any]:
        """Held-out episodes (seeds disjoint from training) at ``train.eval_temperature``, on the EnvWorkers."""
        return heldout_eval.evaluate(
            self.cfg, self.workers, self.counters, self._heal, self.timeline, self.run_start, version, label
        )

    def write_profiles(self) -> dict[str, Any]:
        profiles = {
            "tasks": self.profiler.profiles(),
            "groups_per_step": self.B,
            "group_size": self.G,
            "max_staleness": self.cfg.async_.max_staleness,
            "weights": {t.name: t.weight for t in self.cfg.tasks},
            "rollout_pools": {t.name: t.rollout_pool for t in self.cfg.tasks},
        }
        path = self.run_dir / TASK_PROFILES
        record = from_dict(TaskProfiles, profiles, str(path), lenient=True)
        write_json(path, record)
        return to_dict(record)

    def score_deferred(self, version: int) -> None:
        """Score the pending snapshots (``train.eval_deferred``) as the run pauses after ``version``, so the
        evaluations a checkpoint or the summary holds are complete and in version order."""
        if self.deferred is None or not self.deferred.pending:
            return
        try:
            self.evals += self.deferred.score(version)
        except RayActorError:
            raise TrainerLost("the trainer died before it gave a deferred evaluation's weights") from None
        self.evals.sort(key=lambda e: (int(e["version"]), e["label"] == "after_rl"))

    def checkpoint(self, version: int, final: bool = False) -> None:
        self.score_deferred(version)
        self.write_profiles()
        path = self.run_dir / "checkpoints" / f"step_{version:06d}"
        unfinished = sorted(self.specs.values(), key=lambda spec: spec.index)  # admitted, not yet trained
        state = {
            "version": version,
            "group_index": self.group_index,
            "evals": self.evals,
            "counters": self.counters.as_dict(),
            "wall_s": time.time() - self.run_start,
            "rl_start_s": getattr(self, "rl_start", self.run_start) - self.run_start,
            "final": final,
            "dropped_by_task": dict(self.dropped_by_task),
            "max_buffer_groups": self.plan.buffer_peak,
            "unfinished_groups": [asdict(spec) for spec in unfinished],
            "task_profiler": self.profiler.state(),
        }
        try:
            ref = self.workers.trainer.save_checkpoint.remote(str(path), state)
            self.last_checkpoint = self.workers.deadlines.get("train", ref, "the trainer", "save_checkpoint")
        except RayActorError:
            raise TrainerLost(f"the trainer died while writing checkpoint {path.name}") from None
        except DiskFull as err:  # raised in the trainer: Ray's wrapper forwards .message, the one line
            raise RunError(err.message) from None
        self.last_checkpoint_version = version
        prune_checkpoints(path.parent, self.cfg.train.keep_last_checkpoints, path)

    def _collect_spans_when_due(self, cadence: SpanCadence) -> None:
        """Collect spans where the collection delays no step (span_cadence.py)."""
        rollout_only = bool(self.pending) and self._train_ref is None and self._publish_ref is None
        due = cadence.due(time.time(), self.version, self._train_ref is not None, rollout_only and not self._sync_refs)
        if due is not Collect.NOTHING:
            self.collect_spans(trainer=due is not Collect.WORKERS, workers=due is not Collect.TRAINER)

    def collect_spans(self, trainer: bool = True, workers: bool = True) -> None:
        """Write the spans of the trainer and/or every other worker (rollout, env, borrowed sites) to the timeline."""
        borrowed = self.harvest.drain_spans() if self.harvest is not None and workers else []
        self.timeline.write(self.workers.drain_spans(trainer=trainer, others=workers) + borrowed)

    def _cancel_pending(self) -> None:
        for ref, (spec, worker) in list(self.pending.items()):
            handle = self.workers.env.get(worker)
            if handle is not None:
                handle.cancel_group.remote(spec.group_id)
            self.trajectories.cancel(ref)
            self.cancelled_since_step.append((spec.task, []))
            self.cancelled_by_task[spec.task] += 1
        self.pending.clear()
        self.submitted_at.clear()

    def stopped_summary(self, reason: str) -> dict[str, Any]:
        """What a run that stopped early knows, from the driver alone (no remote call that could hang)."""
        before = next((e for e in self.evals if e["label"] == "before_rl"), None)
        return {
            "name": self.cfg.name,
            "status": "stopped",
            "stop_reason": reason,
            "mode": self.cfg.async_.mode,
            "steps": self.scheduling.core.published_version,
            "wall_s": time.time() - self.run_start,
            "heldout_success_before_rl": before["success"] if before else None,
            "evals": self.evals,
            "last_checkpoint": self.last_checkpoint,
            "dropped_groups_by_task": dict(self.dropped_by_task),
            "trainer_restarts": self.trainer_restarts,
            "steps_lost": self.steps_lost,
            "rollout_restarts": self.workers.rollout_restarts,
            **self.counters.as_dict(),
        }

    def summary(self, version: int) -> dict[str, Any]:
        before = next((e for e in self.evals if e["label"] == "before_rl"), None)
        after = self.evals[-1]
        return {
            "name": self.cfg.name,
            "status": "completed",
            "stop_reason": None,
            "mode": self.cfg.async_.mode,
            "max_staleness": self.cfg.async_.max_staleness,
            "steps": version,
            "wall_s": time.time() - self.run_start,
            "rl_wall_s": self.rl_end - self.rl_start,
            "rl_window": [self.rl_start - self.run_start, self.rl_end - self.run_start],
            "trajectories_trained": self.counters.groups_trained * self.G,
            "trajectories_per_s": self.counters.groups_trained * self.G / max(self.rl_end - self.rl_start, 1e-9),
            "heldout_success_before_rl": before["success"] if before else None,
            "heldout_success_after_rl": after["success"],
            "rl_gain_points": rl_gain_points(before["success"] if before else None, after["success"]),
            "signal_groups_frac_mean": signal_fraction(records := read_metrics(self.run_dir)),
            "finished_signal_share": finished_signal_share(records),
            "heldout_episodes": after["episodes"],
            "evals": self.evals,
            "max_buffer_groups": self.plan.buffer_peak,
            "max_in_flight_groups_bound": self.scheduling.core.max_in_flight,
            "last_checkpoint": self.last_checkpoint,
            "routing": self.workers.routing_stats(),
            "env_workers": self.workers.env_stats(),
            "sync": mean_dicts(self.sync_times),
            "task_profiles": self.write_profiles()["tasks"],
            "dropped_groups_by_task": dict(self.dropped_by_task),
            "cancelled_groups_by_task": dict(self.cancelled_by_task),
            "elastic": self.elastic_events,
            "driver_cores": pinned_driver(),  # cluster.cores: what the driver and the local cluster were pinned to
            **(self.harvest.summary() if self.harvest is not None else {}),  # harvest, harvest_slo, ...
            **self.counters.as_dict(),
            **self.recovery_stats(),
        }

    def recovery_stats(self) -> dict[str, Any]:
        """What lost actors cost: restarts per role, steps redone, and where every started trajectory ended."""
        return {
            "trajectories": self.trajectories.as_dict(),
            "trainer_restarts": self.trainer_restarts,
            "steps_lost": self.steps_lost,
            "router_restarts": self.workers.router_restarts,
            "router_resends": sum(self.env_router_resends.values()),
            "rollout_restarts": self.workers.rollout_restarts,
        }


def _seed_of(seed: int, purpose: str, index: int) -> int:
    return derived_seed(seed, purpose, index)  # shared with the in-process reference loop
