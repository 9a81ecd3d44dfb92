"""A spot explorer: the pull worker on one spot node (:class:`SpotExplorer`).

It pulls a job (a prompt's candidate seeds), samples it one denoising step at a time, heartbeats every
``heartbeat_every`` steps, commits its in-flight latent on a NOTICE, and hands in the rewards and takes its next lease
in one round trip (``complete_and_pull``). With ``cluster.sp_degree > 1`` its DiT forwards run through an elastic SP
group (:class:`~rollarc.diffusion.sp_policy.SPPolicy`) whose shrink and grow orders it obeys between denoising steps
(shrink) or between jobs (grow). Workers are named ``spot<slot>-g<generation>`` (:func:`worker_name`).
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import ray
import torch

from rollarc.config.cluster import CallDeadlines
from rollarc.diffusion.resumable import InFlight, advance, prepare, start
from rollarc.diffusion.sampling import to_images
from rollarc.diffusion.sp_policy import SPPolicy
from rollarc.diffusion.spot_queue import QUEUE_TIMEOUT_S, SPOrder
from rollarc.diffusion.tasks.registry import make_task
from rollarc.diffusion.weight_sync import DiTReceiver
from rollarc.diffusion.workers import load_weights, reward_table, sampling_policy, score
from rollarc.rayproc.deadline import Deadlines
from rollarc.spotlight.heartbeat import pipelined_beat
from rollarc.spotlight.job_queue import Beat, JobSpec
from rollarc.sync.codec import state_checksums

POLL_S = 0.05


def worker_name(slot: int, generation: int) -> str:
    """The name of the worker of ``slot``'s ``generation``-th node (0: the first; each replacement adds one)."""
    return f"spot{slot}-g{generation}"


def slot_of(worker: str) -> int:
    """The slot of a worker named by :func:`worker_name`."""
    return int(worker.removeprefix("spot").split("-g")[0])


def _answer(ref: Any) -> Beat | None:
    """A heartbeat's answer if it is back, else None (never waits)."""
    ready, _ = ray.wait([ref], timeout=0)
    return ray.get(ready[0], timeout=QUEUE_TIMEOUT_S) if ready else None  # ready: only a transfer


@ray.remote(max_restarts=0)
class SpotExplorer:
    def __init__(
        self,
        name: str,
        policy_dir: str,
        tasks: list[str],
        cache_dir: str,
        threads: int,
        version: int,
        sp_degree: int = 1,
        device: str = "cpu",
        member_gpus: float = 0.0,
        member_resource: str | None = None,
    ):
        torch.set_num_threads(threads)
        self.name = name
        self.policy = sampling_policy(policy_dir, sp_degree, threads, device, member_gpus, member_resource)
        self.table = reward_table([make_task(t, Path(cache_dir)) for t in tasks])
        self.version = version
        self.receiver = DiTReceiver(self.policy.transformer.state_dict(), version)
        self.deadlines = Deadlines.of(CallDeadlines())  # the fleet passes the run's to serve
        self.node_id = ray.get_runtime_context().get_node_id()  # in each result: where explorers really ran

    def serve(
        self, queue: Any, noise_level: float, heartbeat_every: int = 1, deadlines: Deadlines | None = None
    ) -> str:
        """Pull and run jobs until the queue closes ("closed") or a notice arrives ("noticed").

        ``heartbeat_every``: denoising steps between heartbeats. Heartbeats are pipelined
        (:func:`~rollarc.spotlight.heartbeat.pipelined_beat`): the answer to one is read at the next, so the
        loop never waits for the queue, and a notice reaches the worker up to two intervals later; those
        steps must stay well inside the notice and the lease (``spot.lease_s``).
        """
        self.deadlines = deadlines or self.deadlines
        if isinstance(self.policy, SPPolicy):
            self.deadlines.get(
                "call",
                queue.sp_cold_start_by.remote(self.name, self.policy.cold_start_s, self.policy.group.node_ids()),
                "the spot queue",
                "sp_cold_start_by",
            )
        lease: Any = None  # the next job's Lease, or None (pull one)
        while True:
            if lease is None:
                self._obey_sp_orders(queue, between_jobs=True)
                lease = self.deadlines.get("call", queue.pull.remote(self.name), "the spot queue", "pull")
                if lease is None:
                    if self.deadlines.get("call", queue.is_closed.remote(), "the spot queue", "is_closed"):
                        return "closed"
                    time.sleep(POLL_S)
                    continue
            if not self._use_version(queue, lease.job.version):
                lease = None  # the queue was restarted empty: its fleet puts the weights and the job back
                continue
            began = time.perf_counter()
            job = lease.job
            state = lease.progress
            if state is None:
                prompts = [job.prompt] * len(job.seeds)
                state = start(self.policy, prompts, list(job.seeds), job.steps, noise_level, job.version)
            beat, in_flight = Beat.OK, None
            prepared = prepare(self.policy, state)  # once per job, not per step
            while not state.finished:
                advance(self.policy, state, 1, prepared)
                if state.finished:
                    break
                self._obey_sp_orders(queue, between_jobs=False)
                if state.step % heartbeat_every:
                    continue
                send = partial(queue.heartbeat.remote, job.job_id, lease.token, state.step)
                beat, in_flight = pipelined_beat(in_flight, send, _answer)
                if beat is not Beat.OK:
                    break
            if beat is Beat.NOTICE:
                self.deadlines.get(
                    "call", queue.commit.remote(job.job_id, lease.token, state, state.step), "the spot queue", "commit"
                )
                return "noticed"
            if beat is Beat.LOST:
                lease = None
                continue
            result = self._result(job, state, began)
            # one round trip between jobs: the result handed in, the next lease and any SP orders back
            ref = queue.complete_and_pull.remote(job.job_id, lease.token, result, self.name)
            lease, orders = self.deadlines.get("call", ref, "the spot queue", "complete_and_pull")
            self._apply_sp_orders(queue, orders)

    def ready(self) -> str:
        """Answers once the worker has loaded its DiT (a benchmark starts its clock after that)."""
        return self.name

    def run_job(self, job: JobSpec, noise_level: float) -> dict[str, Any]:
        """The push baseline (``push_fleet``): run ``job`` start to finish; no lease, heartbeat or commit."""
        if job.version != self.version:
            raise ValueError(
                f"{self.name} holds weights of version {self.version}, job {job.job_id} needs {job.version}"
            )
        began = time.perf_counter()
        state = start(self.policy, [job.prompt] * len(job.seeds), list(job.seeds), job.steps, noise_level, job.version)
        advance(self.policy, state, job.steps)
        return self._result(job, state, began)

    def _result(self, job: JobSpec, state: InFlight, began: float) -> dict[str, Any]:
        """A finished job's result: its rewards, and for the benchmark's time accounting the seconds this worker
        spent on it (sampling and scoring, from ``began``) and when it finished (``done_at``, the epoch clock)."""
        rewards = score(self.table, state.prompts, to_images(state.x))
        return {
            "rewards": rewards,
            "version": job.version,
            "images": len(rewards),
            "worker": self.name,
            "node": self.node_id,
            "seconds": time.perf_counter() - began,
            "done_at": time.time(),
        }

    def _obey_sp_orders(self, queue: Any, between_jobs: bool) -> None:
        """Shrink or grow the SP group as the fleet ordered (between denoising steps, never mid-forward).

        A shrink is obeyed at once, mid-job too: the member's device is going away. A grow waits until the
        worker is between jobs: a joiner is a new process (imports, weights by broadcast), which can take
        longer than a lease, and a worker busy joining sends no heartbeat.
        """
        if not isinstance(self.policy, SPPolicy):
            return
        orders = self.deadlines.get(
            "call", queue.take_sp_orders.remote(self.name, between_jobs), "the spot queue", "take_sp_orders"
        )
        self._apply_sp_orders(queue, orders)

    def _apply_sp_orders(self, queue: Any, orders: list[SPOrder]) -> None:
        """Carry out SP orders already taken from the queue, reporting each one's seconds."""
        if not orders or not isinstance(self.policy, SPPolicy):
            return
        for order, member in orders:
            seconds = self.policy.shrink(member) if order == "shrink" else self.policy.grow()
            self.deadlines.get(
                "call",
                queue.sp_done_by.remote(self.name, order, self.policy.degree, seconds),
                "the spot queue",
                "sp_done_by",
            )

    def _use_version(self, queue: Any, version: int) -> bool:
        """Bring the weights to ``version``: the delta if it starts at the held version, else a full copy. False
        if the queue has none of that version: it was restarted (empty) since the lease was given."""
        if version == self.version:
            return True
        kept = self.deadlines.get("call", queue.weights_of.remote(version), "the spot queue", "weights_of")
        if kept is None:
            return False
        base, (update, full) = kept
        ref = update if base is None or base == self.receiver.version else full
        sent = self.deadlines.get("train", ref, "the trainer", "publish")
        got = self.receiver.sync(sent, lambda _have: self.deadlines.get("train", full, "the trainer", "full"))
        load_weights(self.policy, self.receiver.state)
        self.version = got.version
        checksums = state_checksums(self.receiver.state)
        ref = queue.synced_by.remote(self.name, got.version, got.nbytes, got.full, checksums)
        self.deadlines.get("call", ref, "the spot queue", "synced_by")
        return True
