"""Run one ROSE set-up end to end: worker processes, trajectories, the routing and lending decision, the trace.

Set-ups (all on the same cores: the serving worker on ``serving_cores``, the dedicated rollout worker on
``rollout_cores``):

- ``alone``: the serving worker replays the trace; nothing else runs;
- ``dedicated``: the same, plus multi-turn rollouts on the dedicated worker only;
- ``harvest``: the serving worker is a co-serving worker that also takes rollout turns whenever the SLO
  guard says it has headroom. It is lent and withdrawn by ``policy.lending.LendingPolicy`` and turns are routed
  by ``policy.dispatcher.Dispatcher`` (capacity from headroom, a wait queue), the decisions training makes.

Rollout throughput counts the turns finished while the trace was being replayed (from ``go`` to the last
serving request's completion), in trajectory-equivalents (turns / turns per trajectory) per second.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

from rollarc.policy.dispatcher import BORROWED_POOL, Dispatcher
from rollarc.policy.lending import LendingPolicy
from rollarc.rose.config import RoseConfig
from rollarc.rose.slo import RequestTiming
from rollarc.rose.trace import TraceRequest
from rollarc.rose.turns import Turn
from rollarc.rose.workers import PolicySpec, WorkerSpec, worker_main

Mode = Literal["alone", "dedicated", "harvest"]


@dataclass(frozen=True)
class RolloutShape:
    """Synthetic multi-turn trajectories: a prompt, then per turn ``gen_tokens`` generated + ``obs_tokens`` observed."""

    turns: int = 3
    prompt_tokens: int = 48
    gen_tokens: int = 16
    obs_tokens: int = 8
    in_flight: int = 48  # trajectories kept running at once (enough to fill both workers)


@dataclass
class SetupResult:
    mode: Mode
    window_s: float
    trajectories: int  # whole trajectories finished in the window
    turns: int  # turns finished in the window
    turns_per_trajectory: int
    timings: list[RequestTiming]
    counters: dict[str, dict[str, int]]
    scheduler: dict[str, int]
    pinned: dict[str, list[int]]
    turn_versions_ok: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def traj_per_s(self) -> float:
        """Trajectory-equivalents per second: turns finished / turns per trajectory / window.

        Counting whole trajectories would quantise a short window (none finishes before its last turn).
        """
        return self.turns / self.turns_per_trajectory / self.window_s if self.window_s > 0 else 0.0


class _Trajectories:
    def __init__(self, shape: RolloutShape, vocab: int, seed: int) -> None:
        self.shape, self.vocab, self.rng = shape, vocab, random.Random(seed)
        self.next_id = 0
        self.turn_index: dict[str, int] = {}

    def new(self) -> Turn:
        traj = f"traj{self.next_id}"
        self.next_id += 1
        self.turn_index[traj] = 0
        prompt = [self.rng.randrange(1, self.vocab) for _ in range(self.shape.prompt_tokens)]
        return Turn(f"{traj}.0", traj, prompt, self.shape.gen_tokens)

    def follow(self, done: Turn) -> Turn | None:
        """The trajectory's next turn (prompt = previous prompt + output + observation), or None when it ends."""
        index = self.turn_index[done.traj_id] + 1
        if index >= self.shape.turns:
            del self.turn_index[done.traj_id]
            return None
        self.turn_index[done.traj_id] = index
        observation = [self.rng.randrange(1, self.vocab) for _ in range(self.shape.obs_tokens)]
        return Turn(
            f"{done.traj_id}.{index}",
            done.traj_id,
            done.prompt_ids + done.output_ids + observation,
            self.shape.gen_tokens,
        )


def run_setup(
    mode: Mode,
    rose: RoseConfig,
    trace: list[TraceRequest],
    *,
    policy: PolicySpec | None = None,
    shape: RolloutShape | None = None,
    seed: int = 0,
    timeout_s: float = 600.0,
) -> SetupResult:
    policy = policy or PolicySpec()
    shape = shape or RolloutShape()
    specs = [
        WorkerSpec(
            "serve", "coserving" if mode == "harvest" else "serving", rose.serving_cores, rose, policy, trace, seed
        )
    ]
    if mode != "alone":
        specs.append(WorkerSpec("ded", "dedicated", rose.rollout_cores, rose, policy, [], seed))
    ctx = multiprocessing.get_context("spawn")
    conns: dict[str, Connection] = {}
    procs: list[multiprocessing.process.BaseProcess] = []
    for spec in specs:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(spec, child), daemon=True, name=f"rose-{spec.name}")
        proc.start()
        child.close()  # so a worker that dies ends our recv() with EOFError instead of hanging it
        conns[spec.name], procs = parent, [*procs, proc]
    try:
        try:
            for conn in conns.values():
                conn.recv()  # ("ready",)
            return _drive(mode, rose, conns, policy, shape, seed, timeout_s)
        except EOFError:
            raise RuntimeError(f"a ROSE worker process of the {mode} set-up died (see its traceback above)") from None
    finally:
        for process in procs:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()


def _drive(
    mode: Mode,
    rose: RoseConfig,
    conns: dict[str, Connection],
    policy: PolicySpec,
    shape: RolloutShape,
    seed: int,
    timeout_s: float,
) -> SetupResult:
    # the one routing and lending decision (rollarc.policy.dispatcher, rollarc.policy.lending), as in training
    dispatcher = Dispatcher({}, enforce_capacity=True, dedicated_first=rose.dedicated_first)
    lending = LendingPolicy(rose.lend_after_s, rose.withdraw_after_s, rose.min_capacity)
    trajectories = _Trajectories(shape, policy.vocab_size, seed + 1)
    turns: dict[str, Turn] = {}
    if mode != "alone":
        dispatcher.add_replica("ded", "dedicated", policy.max_num_seqs)
        for _ in range(shape.in_flight):
            turn = trajectories.new()
            turns[turn.turn_id] = turn
            dispatcher.submit(turn.turn_id, turn.traj_id)
    guard_actions = {"lends": 0, "withdrawals": 0}
    for conn in conns.values():
        conn.send(("go",))
    start = time.perf_counter()
    window: float | None = None
    finished = 0
    turns_done = 0
    versions_ok = True
    withdrawing = False  # a withdraw was sent; its turns have not come back yet
    by_conn = {id(c): name for name, c in conns.items()}
    while window is None:
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"ROSE {mode} set-up did not finish its trace within {timeout_s} s")
        for turn_id, route in dispatcher.dispatch():
            conns[route.replica].send(("turn", turns[turn_id]))
        for ready in wait(list(conns.values()), timeout=0.01):
            name = by_conn[id(ready)]
            conn = conns[name]
            while conn.poll():
                message = conn.recv()
                kind = message[0]
                if kind == "done":
                    done: Turn = message[1]
                    turns_done += 1
                    dispatcher.complete(done.turn_id)
                    del turns[done.turn_id]
                    versions_ok &= len(done.token_versions) == len(done.output_ids) == done.max_tokens
                    following = trajectories.follow(done)
                    if following is None:
                        finished += 1
                        dispatcher.release(done.traj_id)
                        following = trajectories.new()
                    turns[following.turn_id] = following
                    dispatcher.submit(following.turn_id, following.traj_id)
                elif kind == "capacity" and not withdrawing:
                    capacity = int(message[1])
                    decision = lending.observe(time.perf_counter(), capacity)
                    if decision == "lend":
                        dispatcher.add_replica(name, BORROWED_POOL, capacity)
                        guard_actions["lends"] += 1
                    elif decision == "withdraw":
                        dispatcher.stop_accepting(name)
                        conn.send(("withdraw",))
                        withdrawing = True
                        guard_actions["withdrawals"] += 1
                    elif lending.lent:
                        dispatcher.set_capacity(name, capacity)  # headroom follows serving load between decisions
                elif kind == "withdrawn":
                    moved: list[Turn] = message[1]
                    for turn in moved:
                        turns[turn.turn_id] = turn
                    dispatcher.migrate(name, [t.turn_id for t in moved])
                    # turns it finished before the withdraw arrived were completed above; none is left on it
                    dispatcher.migrate(name)
                    dispatcher.remove(name)
                    withdrawing = False
                elif kind == "serving_done":
                    window = float(message[1])
    for conn in conns.values():
        conn.send(("stop",))
    results: dict[str, dict[str, Any]] = {}
    for name, conn in conns.items():
        while True:
            message = conn.recv()
            if message[0] == "result":
                results[name] = message[1]
                break
    timings = [RequestTiming(*row) for row in results["serve"]["timings"]]
    return SetupResult(
        mode=mode,
        window_s=window,
        trajectories=finished,
        turns=turns_done,
        turns_per_trajectory=shape.turns,
        timings=timings,
        counters={name: r["counters"] for name, r in results.items()},
        scheduler={**dispatcher.counters, **guard_actions},
        pinned={name: r["pinned"] for name, r in results.items()},
        turn_versions_ok=versions_ok,
        extra={
            name: {"serving_model": r["serving_model"], "rollout_model": r["rollout_model"]}
            for name, r in results.items()
        },
    )
