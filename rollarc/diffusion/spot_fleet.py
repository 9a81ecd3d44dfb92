"""Spot explorers on Ray nodes that vanish: the queue actor, the pull workers, and the preemption injector.

On a laptop each spot node is a Ray node of ``ray.cluster_utils.Cluster`` with its own resources (one
unit of the spot pool's resource plus a name unique to the node), so removing the node kills exactly
the worker on it, as a cloud reclaiming a VM would. On a real cluster the run joins (``cluster.address``) the
same workers run on the nodes that carry the spot pool's resource (:mod:`rollarc.diffusion.joined_nodes`), which
the fleet never adds or removes, and the provider's drains take the injector's place.

Notices come from Ray's node draining (:mod:`rollarc.diffusion.drain_watcher`): the fleet's watcher polls the
GCS's draining nodes, and a drain of a spot worker's node (``ray drain-node --reason
DRAIN_NODE_REASON_PREEMPTION``, the autoscaler's, KubeRay's, or the injector's) is Spotlight's notice to every
worker on it. The injector notices by draining the node through the same API, then removes it at the deadline.

- :class:`~rollarc.diffusion.spot_queue.SpotQueue` (on the head node, which is never preempted) holds the job queue,
  the leases and the weight references the workers fetch (:mod:`rollarc.diffusion.spot_queue`).
- :class:`~rollarc.diffusion.spot_explorer.SpotExplorer` pulls a job, samples it one denoising step at a time,
  heartbeats, and commits its in-flight latent on a notice (:mod:`rollarc.diffusion.spot_explorer`).
- :class:`SpotFleet` (driver side) starts one worker per spot slot, runs the injector's schedule in a
  thread (drain with reason preemption → node removal ``notice_s`` later → replacement at least ``replacement_s`` after that,
  started on the driver's main thread), and counts node-seconds per worker for the cost.

With ``cluster.sp_degree > 1`` each explorer runs its DiT forwards through an elastic SP group of that many
member actors (:class:`~rollarc.diffusion.sp_policy.SPPolicy`), standing for the devices of its slot: on the local
cluster every member but the first on a node of its own that the fleet adds (:func:`member_key` names it to the
drain watcher), on a joined cluster all on the worker's node. A preemption *with notice* of a slot whose group has
more than one member takes one member (:func:`~rollarc.spotlight.preemption.what_is_hit`): the injector drains
that member's node, the watcher's notice becomes the worker's ``shrink`` order for that member (through the queue),
which it obeys between two denoising steps (the survivors regroup with the weights they hold, and the job goes
on), and the node goes at the deadline; ``replacement_s`` later a new member node and a ``grow`` order, obeyed
between jobs, add a member that takes the weights from a peer.

One concept, although over 500 lines: the driver's view of the fleet's slots (``nodes``, under one lock), which three
threads change together: the injector (notices and node removals on schedule), the drain watcher (notices from
Ray) and the driver's main thread (replacements, crashes, the queue's restarts, waiting for a round). The config's
side of the fleet (slots, schedule, local cluster, cost) is :mod:`rollarc.diffusion.spot_setup`.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rollarc.config.cluster import CallDeadlines
from rollarc.config.io import ConfigError
from rollarc.diffusion.drain_watcher import DrainWatcher, drain
from rollarc.diffusion.joined_nodes import JoinedNodes
from rollarc.diffusion.queue_ledger import QueueLedger
from rollarc.diffusion.spot_explorer import POLL_S, SpotExplorer, worker_name
from rollarc.diffusion.spot_queue import HEAD_RESOURCE, QUEUE_NAME, SpotQueue
from rollarc.rayproc.deadline import Deadlines
from rollarc.spotlight.job_queue import JobSpec
from rollarc.spotlight.preemption import Hit, Preemption, Target, busy_slot, what_is_hit
from rollarc.spotlight.spot_nodes import place


@dataclass
class _Node:
    slot: int
    name: str
    node: Any
    worker: Any
    serving: Any
    up_at: float
    node_id: str  # the Ray node's id (hex): a drain of it is this worker's notice
    members: int = 1  # SP members its worker has (what the fleet ordered so far)
    down_at: float | None = None
    # On the local cluster with SP: the node of each member but the first (which shares the worker's node), by the
    # order its group started it (n), and how many members that group started (the next joiner's n).
    member_nodes: dict[int, _MemberNode] = field(default_factory=dict)
    members_started: int = 1


@dataclass
class _MemberNode:
    node: Any
    node_id: str
    up_at: float


def member_key(worker: str, n: int) -> str:
    """The drain watcher's name for ``worker``'s SP member started ``n``-th (on a node of its own)."""
    return f"{worker}#m{n}"


def split_member_key(key: str) -> tuple[str, int | None]:
    """``(worker, n)`` of a :func:`member_key`; ``(worker, None)`` of a worker's own name."""
    worker, _, n = key.partition("#m")
    return worker, int(n) if n else None


@dataclass
class FleetLog:
    """What happened, with times relative to the fleet's start (the recovery timeline of docs/spot.md)."""

    events: list[tuple[float, str, str]] = field(default_factory=list)
    node_seconds: dict[str, float] = field(default_factory=dict)
    worker_nodes: dict[str, str] = field(default_factory=dict)  # every worker -> the Ray node id it was placed on
    member_nodes: dict[str, str] = field(default_factory=dict)  # every member_key -> its own node's id
    member_node_seconds: dict[str, float] = field(default_factory=dict)


class SpotFleet:
    """One pull worker per spot slot on its own Ray node, and the injector thread that preempts them.

    ``cluster``: the local ``ray.cluster_utils.Cluster`` whose spot nodes the fleet adds and removes, or the
    :class:`~rollarc.diffusion.joined_nodes.JoinedNodes` of a cluster the run joined, whose spot nodes it only
    uses: each slot on a spot node with a spare unit of ``spot_resource`` (hard node affinity), placed again at the
    next poll when its node goes; nothing is added or removed there, and nothing is injected.
    """

    def __init__(
        self,
        cluster: Cluster | JoinedNodes,
        spot_resource: str,
        slots: int,
        schedule: list[Preemption],
        replacement_s: float,
        lease_s: float,
        worker_args: tuple[str, list[str], str, int],
        version: int,
        noise_level: float,
        target: Target = "slot",
        busy_wait_s: float = 30.0,
        sp_degree: int = 1,
        pull: bool = True,
        heartbeat_every: int = 1,
        deadlines: Deadlines | None = None,
        drain_poll_s: float = 0.1,
        device: str = "cpu",
        gpus: float = 0.0,
    ):
        self.deadlines = deadlines or Deadlines.of(CallDeadlines())  # `rollarc train` passes cluster:'s
        self.device, self.gpus = device, gpus  # model.device, and GPUs each worker and SP member reserves
        self.spot_resource, self.slots = spot_resource, slots
        self.cluster = cluster if isinstance(cluster, Cluster) else None  # a local cluster: its nodes are ours
        self.joined = cluster if isinstance(cluster, JoinedNodes) else None  # a joined one: its nodes are not
        if self.joined is not None and schedule:
            raise ConfigError(
                "spot.trace / spot.rate_per_hour: the preemption injector removes nodes the fleet started, and on a "
                "cluster the run joined it started none; set spot.trace=null and spot.rate_per_hour=0"
            )
        self.target, self.busy_wait_s, self.sp_degree, self.pull = target, busy_wait_s, sp_degree, pull
        self.heartbeat_every = heartbeat_every
        self.schedule, self.replacement_s = schedule, replacement_s
        self.worker_args, self.noise_level, self.version = worker_args, noise_level, version
        self.start_version = version  # a joiner loads these weights from disk, then later versions from the queue
        self.closed_at: float | None = None
        # Ray names, unique to this fleet, so that an operator or `rollarc bench chaos --path spot` can find them
        self.tag = uuid.uuid4().hex[:8]
        # a queue whose process dies comes back empty (every call to it waits for that and is retried), and the
        # fleet refills it from its ledger (rollarc.diffusion.queue_ledger)
        queue_options: dict[str, Any] = {
            "name": f"{QUEUE_NAME}@{self.tag}",
            "num_cpus": 0,
            "max_restarts": -1,
            "max_task_retries": -1,
        }
        if self.joined is None:
            queue_options["resources"] = {HEAD_RESOURCE: 1}
        else:  # on a node that is not spot (the head): the queue must outlive every preemption
            self.joined.check_some()
            queue_options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.joined.queue_node(), soft=False)
        self.queue = SpotQueue.options(**queue_options).remote(lease_s)  # type: ignore[attr-defined]  # @ray.remote class
        self.ledger = QueueLedger()
        self.incarnation = self.deadlines.get("start", self.queue.incarnation_id.remote(), "the spot queue", "start")
        self.nodes: dict[int, _Node] = {}
        self.generation = dict.fromkeys(range(slots), 0)
        self.log = FleetLog()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.next_job = 0
        self.due: list[tuple[float, int, str | None]] = []  # (when, slot, worker whose SP member rejoins or None)
        self.drained: list[tuple[float, str]] = []  # (deadline, worker) of drains not the injector's: pump removes
        self.injected: set[str] = set()  # workers whose node the injector drained (it removes those itself)
        self.drain_notices = 0
        self.t0 = time.monotonic()
        self.filled: set[int] = set()  # slots that had a worker (on a joined cluster the next one is a new generation)
        if self.joined is None:
            for slot in range(slots):
                self._add(slot)
        else:
            self._place_free_slots()
        self.injector = threading.Thread(target=self._inject, name="spot-injector", daemon=True)
        self.watcher = DrainWatcher(self._worker_nodes, self._on_drain, drain_poll_s, self.stop)
        self.watcher.start()

    def start_pulling(self) -> None:
        """Workers built with ``pull=False`` (so a benchmark could wait for them to load) start pulling."""
        self.pull = True
        with self.lock:
            for n in self.nodes.values():
                if n.serving is None:
                    n.serving = n.worker.serve.remote(
                        self.queue, self.noise_level, self.heartbeat_every, self.deadlines
                    )

    def start_schedule(self) -> None:
        """Start the injector's schedule now (``launch`` does it at the first exploration jobs)."""
        if self.injector.ident is None and self.closed_at is None:
            self._start_schedule()

    def _start_schedule(self) -> None:
        """The schedule counts from the first exploration jobs, not from the fleet's start.

        Starting the trainer and the sampler takes seconds to minutes, depending on the machine, and no
        exploration runs meanwhile; a schedule counted from the fleet's start would spend itself there.
        Events before this moment (the first joins) get negative times.
        """
        now = time.monotonic()
        self.log.events = [(round(at - (now - self.t0), 3), what, who) for at, what, who in self.log.events]
        self.t0 = now
        self.injector.start()

    def _event(self, what: str, who: str) -> None:
        self.log.events.append((round(time.monotonic() - self.t0, 3), what, who))

    def _add(self, slot: int, on_node: str | None = None) -> None:
        """A worker in ``slot``: on a new node of the local cluster, or on the joined cluster's spot node
        ``on_node`` (one unit of the spot resource, and that node only)."""
        gen = self.generation[slot]
        name = worker_name(slot, gen)
        options: dict[str, Any] = {"name": f"{name}@{self.tag}", "num_cpus": 0}
        if self.gpus:
            options["num_gpus"] = self.gpus
        node: Any = None
        member_resource: str | None = None  # SP members on nodes of their own (the local cluster's)
        members: dict[int, _MemberNode] = {}
        if on_node is None:
            if self.cluster is None:
                raise RuntimeError(f"spot slot {slot}: a joined cluster's slot needs the node to place it on")
            node_resource = f"spot_node_{slot}_{gen}"
            resources = {self.spot_resource: 1, node_resource: 1}
            if self.sp_degree > 1:
                member_resource = f"spot_member_{slot}_{gen}_"
                resources[f"{member_resource}0"] = 1  # the first member shares the worker's node
                members = {n: self._add_member_node(member_resource, n) for n in range(1, self.sp_degree)}
            node = self.cluster.add_node(num_cpus=0, resources=resources)
            node_id, options["resources"] = str(node.node_id), {node_resource: 1}
        else:
            node_id, options["resources"] = on_node, {self.spot_resource: 1}
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        policy_dir, tasks, cache, threads = self.worker_args
        worker = SpotExplorer.options(**options).remote(  # type: ignore[attr-defined]  # @ray.remote class
            name,
            policy_dir,
            tasks,
            cache,
            threads,
            self.start_version,
            self.sp_degree,
            self.device,
            self.gpus,
            member_resource,
        )
        serving = (
            worker.serve.remote(self.queue, self.noise_level, self.heartbeat_every, self.deadlines)
            if self.pull
            else None
        )
        with self.lock:
            self.nodes[slot] = _Node(
                slot,
                name,
                node,
                worker,
                serving,
                time.monotonic(),
                node_id,
                self.sp_degree,
                None,
                members,
                self.sp_degree,
            )
            self.filled.add(slot)
            self.log.worker_nodes[name] = node_id
            self.log.member_nodes.update({member_key(name, n): m.node_id for n, m in members.items()})
        self._event("join", name)

    def _add_member_node(self, member_resource: str, n: int) -> _MemberNode:
        """A node of the local cluster for the SP member a group starts ``n``-th (on the main thread: ``add_node``)."""
        assert self.cluster is not None
        node = self.cluster.add_node(num_cpus=0, resources={f"{member_resource}{n}": 1})
        return _MemberNode(node, str(node.node_id), time.monotonic())

    def _remove_member_node(self, target: _Node, n: int) -> None:
        """Take down ``target``'s member node ``n`` (if still up), as the cloud does at a preemption's deadline."""
        with self.lock:
            member = target.member_nodes.pop(n, None)
        if member is None or self.cluster is None:
            return
        self.cluster.remove_node(member.node, allow_graceful=False)
        self.log.member_node_seconds[member_key(target.name, n)] = time.monotonic() - member.up_at

    def _place_free_slots(self) -> None:
        """On a joined cluster (every ``spot.node_poll_s`` at most): each empty slot gets a worker on a spot node
        with a spare unit, if there is one (a node that joined since, or one whose worker went)."""
        if self.joined is None or not self.joined.poll_due():
            return
        with self.lock:
            free = [s for s in range(self.slots) if s not in self.nodes]
            used = Counter(n.node_id for n in self.nodes.values())
        if not free:
            return
        for slot, node_id in place(free, self.joined.capacity(), used).items():
            if slot in self.filled:
                self.generation[slot] += 1
            self._add(slot, node_id)

    def _worker_nodes(self) -> dict[str, str]:
        """Each worker in the fleet -> its Ray node's id, and each SP member on a node of its own
        (:func:`member_key`) -> that node's id: what the drain watcher matches drains against."""
        with self.lock:
            workers = {n.name: n.node_id for n in self.nodes.values()}
            for target in self.nodes.values():
                workers.update({member_key(target.name, i): m.node_id for i, m in target.member_nodes.items()})
            return workers

    def _on_drain(self, key: str, seconds_left: float | None) -> None:
        """The drain watcher's callback: a worker's node drains, so Spotlight's notice (commit in-flight work,
        pull nothing more); or an SP member's own node drains, so its worker's order to let that member go (the
        survivors regroup, the job goes on). A drain the injector did not make (an operator's ``ray drain-node``,
        the autoscaler's) also takes the node out at its deadline (at once without one), at the next ``pump``."""
        worker, member = split_member_key(key)
        if member is None:
            self.deadlines.get("call", self.queue.notice.remote(worker), "the spot queue", "notice")
        else:
            ref = self.queue.order_sp.remote(worker, "shrink", member)
            self.deadlines.get("call", ref, "the spot queue", "order_sp")
        left = "no deadline" if seconds_left is None else f"{seconds_left:.3g} s left"
        with self.lock:
            self.drain_notices += 1
            if key not in self.injected:
                self.drained.append((time.monotonic() + (seconds_left or 0.0), key))
        self._event(f"notice from Ray drain ({left})", key)

    def _inject(self) -> None:
        """The injector thread: notices and node removals on schedule; replacements are left to ``pump``.

        ``Cluster.add_node`` installs signal handlers, which Python allows on the main thread only, so a
        replacement is queued here, due ``replacement_s`` after the loss, and started by the driver's
        thread at its next ``pump`` (the fleet pumps whenever the controller calls it, and every poll
        while it waits for exploration): a replacement joins at least ``replacement_s`` after the loss.
        """
        for p in self.schedule:
            if self.stop.wait(max(0.0, self.t0 + p.at_s - time.monotonic())):
                return
            slot = self.target_slot(p.slot)
            if slot is None:  # the fleet is closing
                return
            self.preempt_and_replace_later(slot, p.notice_s)

    def target_slot(self, scheduled: int) -> int | None:
        """The slot a preemption hits: ``scheduled``, or with ``target: busy`` the busiest worker's slot.

        With ``busy``, waits up to ``busy_wait_s`` for a worker to be at least one step into a job (polling
        the queue's leases); if none is by then, the scheduled slot. ``None`` if the fleet closed meanwhile.
        """
        if self.target == "slot":
            return scheduled
        deadline = time.monotonic() + self.busy_wait_s
        while True:
            held = self.deadlines.get("call", self.queue.held.remote(), "the spot queue", "held")
            with self.lock:
                slot_of = {n.name: slot for slot, n in self.nodes.items()}
            chosen = busy_slot(held, slot_of)
            if chosen is not None:
                return chosen
            if time.monotonic() >= deadline:
                return scheduled
            if self.stop.wait(POLL_S):
                return None

    def preempt_and_replace_later(self, slot: int, notice_s: float) -> None:
        """One injected preemption, from any thread; the replacement (a node, or an SP member) is due
        ``replacement_s`` after the loss."""
        hit = self.preempt(slot, notice_s)
        if hit is not None:
            with self.lock:
                worker = self.nodes[slot].name if hit == "member" else None
                self.due.append((time.monotonic() + self.replacement_s, slot, worker))

    def pump(self) -> None:
        """Take down nodes whose drain deadline passed, and start the replacements that are due (on the calling
        thread, which must be the main one)."""
        self._take_down_drained()
        self._place_free_slots()
        now = time.monotonic()
        with self.lock:
            ready = [(slot, worker) for at, slot, worker in self.due if at <= now]
            self.due = [d for d in self.due if d[0] > now]
        for slot, worker in ready:
            if worker is None:
                self.replace(slot)
            else:
                self.rejoin_member(slot, worker)

    def rejoin_member(self, slot: int, worker: str) -> None:
        """A device comes back to ``worker``'s SP group (skipped if that worker's node is gone meanwhile): on the
        local cluster a new node for the member its group starts next."""
        with self.lock:
            node = self.nodes.get(slot)
            if node is None or node.name != worker:
                return
            node.members += 1
        if self.cluster is not None:
            n = node.members_started
            member = self._add_member_node(f"spot_member_{slot}_{self.generation[slot]}_", n)
            with self.lock:
                node.members_started += 1
                node.member_nodes[n] = member
                self.log.member_nodes[member_key(worker, n)] = member.node_id
        self.deadlines.get("call", self.queue.order_sp.remote(worker, "grow"), "the spot queue", "order_sp")
        self._event("SP member joins", worker)

    def preempt(self, slot: int, notice_s: float) -> Hit | None:
        """Notice ``slot``'s worker (unless ``notice_s`` is 0), then remove its node, or with an SP group of more
        than one member and a notice, one member (``what_is_hit``); what was hit, None if the slot is empty."""
        with self.lock:
            target = self.nodes.get(slot)
        if target is None:
            return None
        if what_is_hit(notice_s, target.members) == "member":
            with self.lock:
                target.members -= 1
                own = max(target.member_nodes, default=None)  # the member on a node of its own started last
            if own is None:  # members share the worker's node (a joined cluster): the order goes to the worker
                ref = self.queue.order_sp.remote(target.name, "shrink")
                self.deadlines.get("call", ref, "the spot queue", "order_sp")
                self._event(f"notice ({notice_s:g} s) to an SP member", target.name)
                return "member"
            key = member_key(target.name, own)
            self._wait_for_group(target.name)
            with self.lock:  # through Ray's drain API: the drain watcher orders the worker to let the member go
                self.injected.add(key)
                node_id = target.member_nodes[own].node_id
            drain(node_id, notice_s, f"rollarc spot injector: {key}")
            self._event(f"drain ({notice_s:g} s) of an SP member's node", key)
            self.stop.wait(notice_s)
            self._remove_member_node(target, own)
            self._event("SP member's node removed", key)
            return "member"
        if notice_s > 0:  # through Ray's drain API: the drain watcher delivers the notice, as on a real cluster
            with self.lock:
                self.injected.add(target.name)
            drain(target.node_id, notice_s, f"rollarc spot injector: {target.name}")
            self._event(f"drain ({notice_s:g} s)", target.name)
            self.stop.wait(notice_s)
        return "node" if self._take_down(slot, target, "preempted" if notice_s > 0 else "lost without notice") else None

    def _wait_for_group(self, worker: str) -> None:
        """Wait (up to ``busy_wait_s``) until ``worker``'s SP group has started: the injector drains a member's node
        once a member runs there. Ray places nothing on a draining node, so a drain while the worker is still
        starting its members would leave one pending on a node that then goes, and the worker's start would wait
        for it until the start deadline (what a cloud may do; a worker that fails to start is replaced)."""
        deadline = time.monotonic() + self.busy_wait_s
        while not self.deadlines.get("call", self.queue.sp_group_up.remote(worker), "the spot queue", "sp_group_up"):
            if time.monotonic() >= deadline or self.stop.wait(POLL_S):
                return

    def _take_down(self, slot: int, target: _Node, what: str) -> bool:
        """Remove ``target``'s node, as the cloud does at a preemption's deadline (``what``: the event); False if
        it left the fleet meanwhile (crashed, or taken down by the other thread)."""
        # out of the fleet first: the push driver would otherwise keep handing the dying worker jobs that fail at
        # once, each counted as a job redone (71 of them in one run under 4 preemptions)
        with self.lock:
            if self.nodes.get(slot) is not target:
                return False
            del self.nodes[slot]
        crashed_before = self._died_on_its_own(target)  # read before the fence's kill below makes it so
        # a spot VM takes its processes with it: fence the worker and kill it now, or it may outlive its removed
        # node for a moment and hand in the job it holds (a pull lease would never expire; a push job never be
        # lost). The kill alone did not do it under load: ray.kill returns before the process is gone (CI once).
        self.deadlines.get("call", self.queue.gone.remote(target.name), "the spot queue", "gone")
        ray.kill(target.worker, no_restart=True)
        if self.cluster is not None:  # a joined cluster's node is not ours: its provider takes it down
            self.cluster.remove_node(target.node, allow_graceful=False)
        self._remove_member_nodes(target)
        target.down_at = time.monotonic()
        self.log.node_seconds[target.name] = target.down_at - target.up_at
        if crashed_before:  # both happened: the worker died (seen only now), then its node went
            self._event("crashed", target.name)
        self._event(what, target.name)
        return True

    def _remove_member_nodes(self, target: _Node) -> None:
        """A worker gone takes its SP members with it (Ray ends the actors a dead actor owned): their nodes go."""
        for n in list(target.member_nodes):
            self._remove_member_node(target, n)

    def _died_on_its_own(self, target: _Node) -> bool:
        """Whether ``target``'s worker is already dead (its ``serve`` call failed) before the fleet took its node.

        The main thread notices a crash only while it waits for exploration (``_raise_worker_errors``); a worker
        that crashed while the trainer ran, on a node being drained, would otherwise count as preempted alone
        (CI once: the chaos run's killed worker was on a node under notice, and no crash was recorded)."""
        if target.serving is None:
            return False
        done, _ = ray.wait([target.serving], timeout=0)
        if not done:
            return False
        try:
            self.deadlines.get("call", done[0], f"{target.name}'s serve", "serve")  # ready: only a transfer
        except ray.exceptions.RayActorError:
            return True
        return False

    def _take_down_drained(self) -> None:
        """Nodes drained by someone other than the injector whose deadline has passed: removed, as the cloud
        would, and a replacement due ``replacement_s`` later (on the calling thread, the main one)."""
        now = time.monotonic()
        with self.lock:
            ready = [w for at, w in self.drained if at <= now]
            self.drained = [d for d in self.drained if d[0] > now]
            named = {n.name: (slot, n) for slot, n in self.nodes.items()}
        for key in ready:
            worker, member = split_member_key(key)
            if worker not in named:
                continue
            slot, target = named[worker]
            if member is not None:  # an SP member's own node: it goes, and a member rejoins later
                if member in target.member_nodes:
                    with self.lock:
                        target.members -= 1
                        self.due.append((time.monotonic() + self.replacement_s, slot, worker))
                    self._remove_member_node(target, member)
                    self._event("SP member's node removed", key)
            elif self._take_down(slot, target, "preempted") and self.joined is None:
                with self.lock:
                    self.due.append((time.monotonic() + self.replacement_s, slot, None))

    def replace(self, slot: int) -> None:
        """A replacement node in ``slot``: a new worker that pulls like any other (on a joined cluster the next
        poll of its nodes places the slot instead)."""
        if self.joined is not None:
            return
        self.generation[slot] += 1
        self._add(slot)

    # --- what the controller calls ---------------------------------------------------------------
    def set_weights(self, update: Any, full: Any, version: int) -> None:
        """Offer workers ``version``: ``update`` (a ref to the trainer's update from ``version - 1``, or a full
        copy when there was no previous version) and ``full`` (a ref to a full copy)."""
        self.pump()
        self._refill_if_restarted()
        self.deadlines.get(
            "call", self.queue.put_weights.remote(version, version - 1, [update, full]), "the spot queue", "put_weights"
        )
        self.ledger.put(version, version - 1, [update, full])
        self.version = version

    def _refill_if_restarted(self) -> None:
        """If Ray restarted the queue (its process died), put back the weights and the jobs not collected."""
        incarnation = self.deadlines.get("call", self.queue.incarnation_id.remote(), "the spot queue", "incarnation")
        if incarnation == self.incarnation:
            return
        self.incarnation = incarnation
        weights, jobs = self.ledger.restarted()
        for version, base, refs in weights:
            self.deadlines.get("call", self.queue.put_weights.remote(version, base, refs), "the spot queue", "refill")
        self.deadlines.get("call", self.queue.refill.remote(jobs), "the spot queue", "refill")
        self._event(f"queue restarted: {len(jobs)} jobs submitted again", QUEUE_NAME)

    def sync_totals(self) -> tuple[int, int]:
        """The workers' weight-sync bytes and full copies so far."""
        stats = self.ledger.read(self.deadlines.get("call", self.queue.stats.remote(), "the spot queue", "stats"))
        return int(stats["sync_bytes"]), int(stats["sync_full_copies"])

    def launch(self, prompts: list[str], seeds: list[list[int]], steps: int, version: int) -> list[int | None]:
        """One job per prompt with its candidate seeds; a prompt with none (a planner gave it no candidates) gets no
        job, and None in its place."""
        self.pump()
        self.start_schedule()  # at the first exploration jobs
        self._refill_if_restarted()
        jobs: list[JobSpec] = []
        ids: list[int | None] = []
        for prompt, s in zip(prompts, seeds, strict=True):
            if not s:
                ids.append(None)
                continue
            jobs.append(JobSpec(self.next_job, prompt, tuple(s), version, steps))
            ids.append(self.next_job)
            self.next_job += 1
        self.ledger.launched(jobs)
        self.deadlines.get("call", self.queue.submit.remote(jobs), "the spot queue", "submit")
        return ids

    def wait(self, job_ids: list[int | None]) -> dict[str, Any]:
        """Block until every job is done (whoever did it), then the controller's exploration result (no rewards
        where ``launch`` made no job)."""
        began = time.time()  # each job's lease bounds a lost worker; a whole round, the training deadline
        real = [j for j in job_ids if j is not None]
        while (
            results := self.deadlines.get("call", self.queue.results.remote(real), "the spot queue", "results")
        ) is None:
            self.deadlines.check("train", began, "the spot fleet", f"{len(real)} exploration jobs")
            self._refill_if_restarted()
            self.pump()
            self._raise_worker_errors()
            time.sleep(POLL_S)
        self.ledger.collected.update(real)
        versions = {r["version"] for r in results}
        if len(versions) > 1:
            raise RuntimeError(f"one exploration round came back with weight versions {sorted(versions)}")
        by_id = dict(zip(real, results, strict=True))
        return {
            "rewards": [[] if j is None else by_id[j]["rewards"] for j in job_ids],
            "version": versions.pop() if versions else self.version,  # nothing explored: the version offered
            "images": sum(r["images"] for r in results),
        }

    def _raise_worker_errors(self) -> None:
        """A worker whose code failed would leave its jobs to expire forever: surface its error instead.

        A worker that died while its node is still in the fleet (a preempted one is taken out first) crashed
        (a killed process, an OOM): its lease expires as a vanished worker's does, and its slot is replaced
        like a preempted one, ``replacement_s`` later; before, the slot stayed empty for the rest of the run."""
        with self.lock:
            serving = {n.serving: n.slot for n in self.nodes.values() if n.serving is not None}
        if not serving:
            return
        done, _ = ray.wait(list(serving), num_returns=len(serving), timeout=0)
        for ref in done:
            try:
                self.deadlines.get("call", ref, f"spot slot {serving[ref]}'s worker", "serve")  # ready
            except ray.exceptions.RayActorError:
                self._crashed(serving[ref])

    def _crashed(self, slot: int) -> None:
        """``slot``'s worker died on its own: out of the fleet, its node removed, a replacement due."""
        with self.lock:
            target = self.nodes.pop(slot, None)
        if target is None:  # preempted meanwhile: the injector did all this
            return
        self.deadlines.get("call", self.queue.gone.remote(target.name), "the spot queue", "gone")
        if self.cluster is not None:
            self.cluster.remove_node(target.node, allow_graceful=False)
        self._remove_member_nodes(target)
        target.down_at = time.monotonic()
        self.log.node_seconds[target.name] = target.down_at - target.up_at
        self._event("crashed", target.name)
        if self.joined is None:  # on a joined cluster the next poll places the slot again
            with self.lock:
                self.due.append((target.down_at + self.replacement_s, slot, None))

    def counters(self) -> dict[str, int]:
        """What preemption has cost so far, for the step's metrics: the queue's counters and the losses."""
        stats = self.ledger.read(self.deadlines.get("call", self.queue.stats.remote(), "the spot queue", "stats"))
        keys = (
            "committed_on_notice",
            "requeued_on_expiry",
            "lost_steps",
            "resumed_steps",
            "duplicate_jobs",
            "sp_regroups",
            "sp_joins",
            "sync_bytes",
            "sync_full_copies",
            "queue_restarts",
        )
        with self.lock:
            explorers = len(self.nodes)
        return {
            **{k: int(stats[k]) for k in keys},
            "explorers": explorers,  # workers placed now (on a joined cluster, fewer while spot capacity is short)
            "preemptions": self._preemptions(),
            "crashes": self._crashes(),
            "drain_notices": self.drain_notices,
            "drain_poll_errors": self.watcher.poll_errors,
        }

    def _crashes(self) -> int:
        """Workers that died without a preemption (``_crashed``)."""
        return sum(1 for _, what, _ in self.log.events if what == "crashed")

    def _preemptions(self) -> int:
        """Nodes removed (a worker's, with notice or without, or an SP member's own) and SP members noticed on their
        worker's node."""
        hits = ("preempted", "lost without notice", "SP member's node removed")
        return sum(1 for _, what, _ in self.log.events if what in hits or what.endswith("to an SP member"))

    def stats(self) -> dict[str, Any]:
        out = self.ledger.read(self.deadlines.get("call", self.queue.stats.remote(), "the spot queue", "stats"))
        now = self.closed_at or time.monotonic()
        seconds = dict(self.log.node_seconds)
        member_seconds = dict(self.log.member_node_seconds)
        with self.lock:
            for n in self.nodes.values():
                seconds[n.name] = now - n.up_at
                member_seconds.update({member_key(n.name, i): now - m.up_at for i, m in n.member_nodes.items()})
            placed = len(self.nodes)
        out.update(
            spot_node_seconds=seconds,
            # SP members' own nodes (the local cluster's, sp_degree > 1): apart, so the cost stays per worker
            spot_member_node_seconds=member_seconds,
            member_nodes=dict(self.log.member_nodes),
            notice_source="ray_drain",  # every node notice comes from Ray's draining nodes (drain_watcher)
            drain_notices=self.drain_notices,
            drain_poll_errors=self.watcher.poll_errors,
            preemptions=self._preemptions(),
            crashes=self._crashes(),
            events=self.log.events,
            explorers=placed,  # workers placed now (as counters())
            joined_cluster=self.joined is not None,
            # the spot nodes explorers were placed on (a joined cluster's; the local cluster's that the fleet added)
            spot_nodes=sorted(set(self.log.worker_nodes.values())),
            worker_nodes=dict(self.log.worker_nodes),
        )
        return out

    def close(self) -> None:
        if self.closed_at is not None:
            return
        self.closed_at = time.monotonic()
        self.stop.set()
        if self.injector.ident is not None:
            self.injector.join(timeout=30)
        self.watcher.join(timeout_s=30)
        self.deadlines.get("call", self.queue.close.remote(), "the spot queue", "close")
