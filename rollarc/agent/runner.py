"""Run many trajectories concurrently in one event loop: the core of an EnvWorker.

Environments are stateful CPU work, so each ``reset``/``step`` runs in a thread pool, bounded by a
timeout; a task with ``inline_env_steps`` (steps of microseconds, where the hop costs more than the step)
runs them on the event loop instead, with the same error handling and no timeout. An env that raises or hangs fails only its own trajectory, with the reason recorded. Injected
latency (a model of remote sandboxes and tools) is a non-blocking ``asyncio.sleep`` before the step,
so it costs no thread and no CPU.

Hung environments: a thread stuck in ``env.step`` cannot be killed from Python. After its timeout the
trajectory fails, the env instance is discarded, and the stuck thread is counted. When half the pool
is stuck, the runner swaps in a fresh pool, so hung envs never starve the others (the monitor). The
pool's threads are daemons (:class:`DaemonThreadPool`), so a stuck one never keeps the process alive
at exit. The threads of a replaced pool live on while they are stuck, so they are counted across pools
(``stuck_threads``: alive now, ``stuck_threads_peak``), and bounded: once ``max_stuck_threads`` are
stuck, no new env call is started in this process (calls already running may still hang, so at most
``max_stuck_threads + max_env_threads`` are ever stuck) (it fails its trajectory, kind ``env_*_threads_exhausted``),
and the controller stops the run with a one-line error naming the worker (``async.max_stuck_env_threads``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rollarc.agent.chat import ChatRenderer
from rollarc.agent.daemon_pool import DaemonThreadPool
from rollarc.agent.failures import FailureTally
from rollarc.agent.loop import EnvFailure, GenerateFn, run_trajectory
from rollarc.agent.seeds import trajectory_latency_seed
from rollarc.agent.trajectory import Trajectory
from rollarc.data.config import HELDOUT_OPTION
from rollarc.envs.latency import LatencyModel
from rollarc.envs.registry import instructions as env_instructions
from rollarc.envs.registry import make_env

if TYPE_CHECKING:
    from rollarc.config import SamplingConfig, TaskConfig  # type only: the training config is above agent/


@dataclass(frozen=True)
class EpisodeSpec:
    """What to run: one trajectory of ``task`` on env seed ``seed``."""

    traj_id: str
    task: str
    seed: int
    group_id: str = ""
    sampling_seed: int | None = None
    greedy: bool = False
    temperature: float | None = None  # held-out evaluation that samples at this temperature (None: training)
    heldout: bool = False  # a held-out evaluation episode: a dataset task plays a row of its held-out split


@dataclass
class RunnerStats:
    started: int = 0
    finished: int = 0
    failed: int = 0
    env_timeouts: int = 0
    env_errors: int = 0
    injected_failures: int = 0
    hung_threads: int = 0  # stuck in the current pool (half of the pool stuck: it is replaced)
    stuck_threads: int = 0  # stuck and alive in this process, in every pool so far (replaced ones included)
    stuck_threads_peak: int = 0
    pool_replacements: int = 0
    failures: FailureTally = field(default_factory=FailureTally)


RewardFn = Callable[[Trajectory], Awaitable[float]]


class RewardFailure(RuntimeError):
    """The model-based reward could not score a trajectory (timeout, service error); it fails that trajectory."""


class EpisodeRunner:
    """Runs episodes; ``reward_fn`` (optional) scores each finished trajectory with a model-based reward.

    The score is awaited inside the trajectory's own task, so a pending reward never blocks other
    trajectories. It is stored as ``traj.model_reward`` and added to the environment return with
    ``reward_weight`` (the shaped reward); a :class:`RewardFailure` fails that trajectory alone.
    """

    def __init__(
        self,
        tasks: dict[str, TaskConfig],
        renderer: ChatRenderer,
        generate: GenerateFn,
        sampling: SamplingConfig,
        max_env_threads: int = 16,
        span_sink: Callable[[dict[str, Any]], None] | None = None,
        worker_name: str = "env-0",
        latency_seed: int = 0,
        reward_fn: RewardFn | None = None,
        reward_weight: float = 1.0,
        max_stuck_threads: int = 256,
    ):
        self.tasks = tasks
        self.renderer = renderer
        self.generate = generate
        self.sampling = sampling
        self.greedy_sampling = sampling.model_copy(update={"temperature": 0.0, "top_p": 1.0, "top_k": 0})
        self.max_env_threads = max_env_threads
        self.span_sink = span_sink
        self.worker_name = worker_name
        self.stats = RunnerStats()
        self._executor = DaemonThreadPool(max_env_threads, thread_name_prefix="env")
        self._hung: set[concurrent.futures.Future] = set()  # timed out in the current pool, still running
        self._stuck: set[concurrent.futures.Future] = set()  # timed out in any pool, still running
        self.max_stuck_threads = max_stuck_threads
        self._latency = {name: LatencyModel(task.latency) for name, task in tasks.items()}
        self._latency_seed = latency_seed
        self._free_envs: dict[str, list[Any]] = {name: [] for name in tasks}
        self._instructions: dict[str, str] = {}
        self._wall_offset = perf_to_wall_offset()
        self.reward_fn = reward_fn
        self.reward_weight = reward_weight

    async def run(self, spec: EpisodeSpec) -> Trajectory:
        task = self.tasks[spec.task]
        traj = Trajectory(
            traj_id=spec.traj_id, task=spec.task, seed=spec.seed, group_id=spec.group_id, worker=self.worker_name
        )
        self.stats.started += 1
        try:
            env = await self._acquire_env(spec.task)
        except EnvFailure as err:
            return self._count(traj.fail(f"env construction: {err}", kind=f"env_construction_{err.kind}"))
        broken = False
        # One generator per trajectory: its delays and failures must not depend on how the trajectories
        # sharing this worker interleave (that made synchronous runs with failure_prob > 0 irreproducible).
        # (Seeding one costs tens of microseconds a trajectory: none is made when the task's latency is inert.)
        model = self._latency[spec.task]
        latency_rng = (
            None
            if model.inert
            else np.random.default_rng(
                trajectory_latency_seed(spec.sampling_seed, spec.traj_id, spec.seed, fallback=self._latency_seed)
            )
        )

        async def env_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            nonlocal broken
            if latency_rng is not None and fn != env.reset:  # bound methods: equality, not identity
                for _ in range(model.config.failure_retries + 1):
                    delay, fail = model.sample(latency_rng)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if not fail:
                        break
                    self.stats.injected_failures += 1
                else:
                    raise EnvFailure("injected failure (latency profile failure_prob)", kind="injected")
            try:
                if task.inline_env_steps:
                    return self._unwrap(_guarded(fn, *args, **kwargs))
                return await self._call_in_thread(fn, task.step_timeout_s, *args, **kwargs)
            except EnvFailure:
                broken = True
                raise

        sampling = self.greedy_sampling if spec.greedy else self.sampling
        if spec.temperature is not None:
            sampling = sampling.model_copy(update={"temperature": spec.temperature})
        traj = await run_trajectory(
            env,
            self.renderer,
            self.generate,
            task.agent,
            sampling,
            traj,
            env_call,
            instructions=self._instructions.get(spec.task, "") if task.agent.instructions else "",
            on_span=self._span,
            sampling_seed=spec.sampling_seed,
            reset_options={HELDOUT_OPTION: True} if spec.heldout and task.dataset is not None else None,
        )
        if not broken:
            self._free_envs[spec.task].append(env)
        if self.reward_fn is not None and traj.status == "ok" and not spec.greedy and spec.temperature is None:
            traj = await self._score(traj)
        return self._count(traj)

    async def _score(self, traj: Trajectory) -> Trajectory:
        if self.reward_fn is None:
            return traj
        t0 = time.perf_counter()
        try:
            score = float(await self.reward_fn(traj))
        except RewardFailure as err:
            return traj.fail(f"reward: {err}", kind="reward_failure")
        traj.model_reward = score
        traj.reward = traj.reward + self.reward_weight * score
        traj.timings["reward_s"] = time.perf_counter() - t0
        self._span("reward", t0, time.perf_counter(), traj=traj.traj_id, task=traj.task)
        return traj

    def _count(self, traj: Trajectory) -> Trajectory:
        self.stats.finished += 1
        if traj.status == "failed":
            self.stats.failed += 1
            self.stats.failures.add(traj)
        return traj

    async def _acquire_env(self, task_name: str) -> Any:
        free = self._free_envs[task_name]
        if free:
            return free.pop()
        spec = self.tasks[task_name].env_spec
        env = await self._call_in_thread(make_env, self.tasks[task_name].step_timeout_s, spec)
        self._instructions.setdefault(task_name, env_instructions(env))
        return env

    async def _call_in_thread(self, fn: Callable[..., Any], timeout_s: float, *args: Any, **kwargs: Any) -> Any:
        if self.stuck_threads() >= self.max_stuck_threads:
            raise EnvFailure(
                f"{self.stuck_threads()} env threads of {self.worker_name} are stuck in env code (cap "
                f"{self.max_stuck_threads}): no new env call starts here",
                kind="threads_exhausted",
            )
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def call() -> tuple[str, Any]:
            _wake(loop, started)
            return _guarded(fn, *args, **kwargs)

        future = self._executor.submit(call)
        future.add_done_callback(lambda f: _wake(loop, started) if f.cancelled() else None)  # cancelled unrun
        # ``timeout_s`` bounds the call from when a thread takes it up, not its wait for a free thread: when many
        # episodes reach a slow tool at once, queued calls used to time out unrun (failing held-out episodes under
        # load) and count as stuck threads. The wait itself ends with the trajectory (async.trajectory_timeout_s).
        try:
            await started.wait()
        except asyncio.CancelledError:
            future.cancel()  # the trajectory is gone: a call still queued never runs
            raise
        try:
            outcome, value = await asyncio.wait_for(asyncio.wrap_future(future, loop=loop), timeout_s)
        except TimeoutError:
            self.stats.env_timeouts += 1
            self._note_hung(future)
            raise EnvFailure(
                f"timed out after {timeout_s:g} s in {getattr(fn, '__name__', fn)}", kind="timeout"
            ) from None
        return self._unwrap((outcome, value))

    def _unwrap(self, result: tuple[str, Any]) -> Any:
        """The value of a :func:`_guarded` call, or its error as an :class:`EnvFailure` (counted)."""
        outcome, value = result
        if outcome == "error":
            self.stats.env_errors += 1
            error_type, message = value
            raise EnvFailure(message, kind=f"error:{error_type}")
        return value

    def stuck_threads(self) -> int:
        """Env threads of this process, in any pool, still running a call that timed out."""
        self._stuck = {f for f in self._stuck if not f.done()}
        self.stats.stuck_threads = len(self._stuck)
        return len(self._stuck)

    def _note_hung(self, future: concurrent.futures.Future) -> None:
        """The hung-env monitor: count stuck threads, and replace the pool when half of it is stuck."""
        self._hung = {f for f in self._hung if not f.done()}
        if not future.done():
            self._hung.add(future)
            self._stuck.add(future)
        self.stats.hung_threads = len(self._hung)
        self.stats.stuck_threads_peak = max(self.stats.stuck_threads_peak, self.stuck_threads())
        if len(self._hung) * 2 >= self.max_env_threads:
            self._executor.shutdown(cancel_futures=False)
            self._executor = DaemonThreadPool(self.max_env_threads, thread_name_prefix="env")
            self._hung.clear()
            self.stats.pool_replacements += 1

    def _span(self, kind: str, t0: float, t1: float, **fields: Any) -> None:
        if self.span_sink is not None:
            self.span_sink(
                {
                    "worker": self.worker_name,
                    "role": "env",
                    "kind": kind,
                    "t0": t0 + self._wall_offset,
                    "t1": t1 + self._wall_offset,
                    **fields,
                }
            )

    def close(self) -> None:
        self._executor.shutdown(cancel_futures=True)


def _wake(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    """Set ``event`` from any thread (nothing to wake once its loop has closed)."""
    if not loop.is_closed():
        loop.call_soon_threadsafe(event.set)


def _guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """Run user environment code in a worker thread: ("ok", value) or ("error", (exception type, reason)).

    Environment code is a plugin boundary: it may raise anything. Every error is kept as a reason
    string and fails only the trajectory that called it; nothing is swallowed silently.
    """
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - plugin boundary: any env error fails only its trajectory
        return "error", (type(err).__name__, f"{type(err).__name__}: {err}")


def perf_to_wall_offset() -> float:
    """Add this to ``time.perf_counter()`` readings to get wall-clock (epoch) seconds."""
    return time.time() - time.perf_counter()
