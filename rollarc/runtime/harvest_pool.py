"""HarvestPool: the driver's side of borrowed serving capacity (``harvest:``, docs/rose.md).

It starts the co-serving replicas (the borrowed site) and, before any is lent, settles the SLO their guards keep
(``harvest.slo_source``: measured by a calibration, read from a recorded one, or fixed; :mod:`rollarc.runtime.harvest_slo`).
The calibration runs during the run's first ``calibration_s``, under the run's own load (the trainer and the
dedicated rollouts at work) with nothing lent: serving as it is without borrowing, the SLO lending must then keep.
A replica reports no headroom until it holds the SLO. Then it asks each for its headroom every ``harvest.poll_s``,
and applies :class:`~rollarc.policy.lending.LendingPolicy`'s decisions with the router's protocol: ``add_replica``
into the ``borrowed`` pool to lend, ``remove_replica`` (drain for ``drain_timeout_s``, then abort; the agent
loops resume the aborted turns from their partial output on the dedicated replicas) to withdraw. While a replica
is lent, the router's sticky routing sends a trajectory's next turn where its prefix is cached.

Weights: one copy of each update crosses into the borrowed site, split into ``harvest.replicas`` shards (the
trainer encodes one delta per shard, ``TrainWorker.register_site``): each shard goes to one member, its owner,
and fans out from there to the others (``rollarc.sync.site.shard_routes``), so every member ends with the whole
weights. Bytes per hop, cross-site and in-site, and full copies are counted per step; a member that missed a
shard (a member on its route died) catches up from the trainer before the step ends. A replica that dies is
counted, taken out of the router, and replaced (``replace_dead``); the replacement catches up with full copies
of every shard. Plumbing only: the decisions are the pure policy's.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from rollarc.config import Config
from rollarc.config.harvest import HarvestConfig
from rollarc.config.io import ConfigError
from rollarc.policy.dispatcher import BORROWED_POOL
from rollarc.policy.lending import LendingPolicy
from rollarc.rayproc.deadline import ActorHung, Deadlines
from rollarc.rose.calibration import (
    serving_record,
)
from rollarc.rose.guard_actions import guard_actions
from rollarc.rose.pinning import missing_cores
from rollarc.rose.slo import RequestTiming, latencies
from rollarc.runtime.coserving_replica import CoServingReplica
from rollarc.runtime.harvest_slo import SiteSLO
from rollarc.runtime.ray_cluster import uses_gpus
from rollarc.runtime.router import REGISTERING
from rollarc.runtime.site_relay import site_bytes
from rollarc.runtime.weight_sync import SyncPayload
from rollarc.sync.shard import ShardSpec
from rollarc.sync.site import shard_routes
from rollarc.sync.versions import WHOLE

# Replica counters summed into harvest_<name>: migrated_kept (_tokens) are migrated turns that carried partial output
# (and its tokens), which the agent loop resumed instead of regenerating.
COUNTED = (
    "preemptions",
    "preempted_for_slo",
    "preempted_for_memory",
    "pauses",
    "paused_for_slo",
    "paused_for_memory",
    "paused_for_slots",
    "refused_tpot",
    "refused_ttft_waiting",
    "refused_ttft_arrival",
    "withdrawn",
    "turns_done",
    "rollout_overruns",
    "loop_gap_ms",
    "migrated",
    "migrated_kept",
    "migrated_kept_tokens",
    "served",
    "serving_requests",
    # the serving steps right after a rollout step: how many, measured and predicted time (the guard's aftermath)
    "serving_after_rollout_steps",
    "serving_after_rollout_us",
    "serving_after_rollout_predicted_us",
)


def counted(report: dict[str, Any]) -> Counter[str]:
    """The ``COUNTED`` counters of one replica's headroom report (0 for any it lacks)."""
    counters = report.get("counters", {})
    return Counter({key: int(counters.get(key, 0)) for key in COUNTED})


def serving_unfinished(counters: Counter[str]) -> int:
    """Serving requests a co-serving replica had been handed and not finished, from its counters (``COUNTED``)."""
    return max(0, counters["serving_requests"] - counters["served"])


def lent_registrations(
    lending: dict[str, LendingPolicy], replicas: dict[str, Any], reports: dict[str, dict[str, Any]]
) -> list[tuple[str, Any, str, int]]:
    """The router's registrations ``(name, handle, pool, capacity)`` of the replicas lent now.

    A router that Ray restarted knows no replica; without these, borrowed capacity would be silently lost
    until the replica was withdrawn and lent again. Each comes back at the headroom it last reported (the
    router's capacity follows the reports between decisions). Pure: a unit test calls it.
    """
    return [
        (name, replicas[name], BORROWED_POOL, int(reports[name]["capacity"]))
        for name, policy in lending.items()
        if policy.lent and name in replicas
    ]


class HarvestPool:
    def __init__(
        self,
        cfg: Config,
        router: Any,
        trainer: Any,
        policy_dir: str,
        version: int,
        replica_options: dict[str, Any] | None = None,
        run_dir: Path | None = None,
    ) -> None:
        """``replica_options``: extra keyword arguments of every ``CoServingReplica`` (``rollarc bench rose`` passes
        the trace window it replays once and the cores it is pinned to). ``run_dir``: where the SLO's calibration is
        recorded, and found again on resume (``harvest.slo_source: calibrate``)."""
        assert cfg.harvest is not None
        self.run_dir = run_dir
        self.replica_options = dict(replica_options or {})
        if cfg.harvest is not None and cfg.harvest.cores is not None:  # the serving deployment's own cores
            problem = missing_cores(cfg.harvest.cores, "harvest.cores")
            if problem is not None:
                raise ConfigError(problem)
            self.replica_options.setdefault("cores", list(cfg.harvest.cores))
        self.cfg = cfg
        self.deadlines = Deadlines.of(cfg.cluster)
        self.harvest: HarvestConfig = cfg.harvest
        self.router = router
        self.trainer = trainer
        self.policy_dir = policy_dir
        self.replicas: dict[str, Any] = {}
        self.lending: dict[str, LendingPolicy] = {}
        self.reports: dict[str, dict[str, Any]] = {}  # the last headroom report of each replica
        self.retired: Counter[str] = Counter()  # counters of replicas that died, as last reported
        self.counters: Counter[str] = Counter(
            lends=0,
            withdrawals=0,
            migrated_turns=0,
            drained_turns=0,
            deaths=0,
            replacements=0,
            restarts=0,
            serving_lost=0,  # serving requests a replica had been handed and not finished when it died or was killed
        )
        self.hops: list[dict[str, Any]] = []  # this step's weight hops
        self.layouts: tuple[ShardSpec, ...] = ()  # the site's shard layouts, registered with the trainer
        self.full_copy_bytes = 0  # one fp32 copy of the weights: the yardstick of the site's bytes
        self._register()
        self._round: set[Any] = set()  # the sync refs of the version being delivered
        self._round_members: list[str] = []  # the members it was sent to
        self._reached: dict[str, set[ShardSpec]] = {}  # the shards each member applied (or already held)
        self._serial = 0
        self._headroom: dict[Any, str] = {}
        self._spans: list[dict[str, Any]] = []  # generate spans that came with the headroom reports
        self._syncs: dict[Any, str] = {}
        self._last_poll = 0.0
        self._joining: dict[Any, tuple[str, Any]] = {}  # catch-up ref -> (name, handle) of a starting replacement
        self.site_slo = SiteSLO(self.harvest, self.deadlines, run_dir, "cuda" if self._gpus() else "cpu")
        self._start_all(version)

    def _start_all(self, version: int) -> None:
        """The site's replicas; while the SLO is unsettled, their first ``calibration_s`` is its sample."""
        calibrate = self.site_slo.sampling
        for _ in range(self.harvest.replicas):
            self._start(version, calibration_s=self.harvest.calibration_s if calibrate else None)
        if calibrate:
            self.site_slo.sample(self.replicas)

    def _register(self) -> None:
        """Have the trainer encode every update in ``harvest.replicas`` shards, from its next version on.

        Without a trainer (``rollarc bench rose``: no weight updates), or with ``harvest.lend: false`` (never lent:
        the site gets no updates), the replicas hold the whole weights they started with."""
        if self.trainer is None or not self.harvest.lend:
            self.layouts, self.full_copy_bytes = (WHOLE,), 0
            return
        site = self.deadlines.get(
            "call", self.trainer.register_site.remote(self.harvest.replicas), "the trainer", "register_site"
        )
        self.layouts, self.full_copy_bytes = tuple(site["layouts"]), int(site["full_copy_bytes"])

    # ---- membership -------------------------------------------------------------------------------------
    def _gpus(self) -> int:
        """1 when the replicas run on an accelerator (S and the policy share one device); never without a GPU in the
        cluster, joined or local (a joined CPU cluster's replica waited for one until the start deadline)."""
        has_gpu = self.cfg.model.device != "cpu" and ray.cluster_resources().get("GPU", 0) > 0
        return 1 if has_gpu and uses_gpus(self.cfg.cluster, self.cfg.model.device) else 0

    def _start(self, version: int | None, calibration_s: float | None = None) -> str:
        """``calibration_s``: the replica's first requests are the SLO's serving-alone sample (:class:`~rollarc.runtime.harvest_slo.SiteSLO`)."""
        name = f"borrowed-{self._serial}"
        self._serial += 1
        gpus = self._gpus()
        handle = CoServingReplica.options(  # type: ignore[attr-defined]  # @ray.remote class
            name=name, num_cpus=0, num_gpus=gpus, max_concurrency=10_000
        ).remote(
            name,
            self.policy_dir,
            self.cfg.engine,
            self.harvest,
            self.cfg.async_.in_flight_update,
            version,
            self.cfg.sync,
            self.trainer,
            self.cfg.engine.dtype or self.cfg.model.dtype,
            self.cfg.seed * 1000 + self._serial,
            self.layouts,
            device=self.cfg.model.device if gpus else "cpu",
            **self.replica_options,
        )
        if version is None:  # a replacement: its checkpoint is older than the trainer's weights; joins when caught up
            self._joining[handle.catch_up.remote()] = (name, handle)
            return name
        self.deadlines.get("start", handle.start.remote(calibration_s), name, "start")
        if (
            self.site_slo.slo is not None
        ):  # settled (a restart from a checkpoint, or a given SLO): held before it may be lent
            self.site_slo.push(name, handle)
        self._join(name, handle)
        return name

    def _join(self, name: str, handle: Any) -> None:
        self.replicas[name] = handle
        self.lending[name] = LendingPolicy(
            self.harvest.lend_after_s, self.harvest.withdraw_after_s, self.harvest.min_capacity, self.harvest.lend
        )

    def _joined(self) -> None:
        """Replacements whose full copy has arrived start serving and join the site (not blocking the driver)."""
        if not self._joining:
            return
        ready, _ = ray.wait(list(self._joining), num_returns=len(self._joining), timeout=0)
        for ref in ready:
            name, handle = self._joining.pop(ref)
            try:
                caught = self.deadlines.get("call", ref, name, "catch_up")  # ready
                self.deadlines.get("start", handle.start.remote(), name, "start")
                if self.site_slo.slo is not None:  # the run's SLO, before it may be lent
                    self.site_slo.push(name, handle)
            except RayActorError:
                self.counters["deaths"] += 1
                if self.harvest.replace_dead:
                    self._replace()
                continue
            self.hops.append(
                {
                    "source": "origin",
                    "target": name,
                    "cross_site": True,
                    "bytes": 0,
                    "catch_up_bytes": caught.bytes,
                    "full_copy": caught.full_copy,
                }
            )
            self._join(name, handle)

    def _on_death(self, name: str) -> None:
        if name not in self.replicas:
            return
        self.replicas.pop(name)
        policy = self.lending.pop(name)
        self._retire(name)
        self.counters["deaths"] += 1
        if policy.lent:
            self.deadlines.get("call", self.router.mark_dead.remote(name), "the router", "mark_dead")
            self.deadlines.get("call", self.router.remove_replica.remote(name, 0.0), "the router", "remove_replica")
        if self.harvest.replace_dead:
            self._replace()

    def _retire(self, name: str) -> None:
        """Keep a replica's counters as last reported, and count the serving requests it leaves unfinished: the
        trace it replayed lives in it, so they go with it (at most one poll's arrivals more, unseen)."""
        last = counted(self.reports.pop(name, {}))
        self.retired.update(last)
        self.counters["serving_lost"] += serving_unfinished(last)

    def _replace(self) -> None:
        """Start a replacement now; it joins the site (and may be lent) once it has caught up with a full copy."""
        self._start(None)
        self.counters["replacements"] += 1

    def restart_from(self, policy_dir: str, trainer: Any, version: int) -> None:
        """The trainer was lost: the borrowed site starts over from ``policy_dir`` at ``version``.

        Its replicas hold weights of the lost steps and the lost trainer's handle (they catch up from it), so,
        as ``Workers.restart_from`` does for the dedicated replicas, each is taken out of the router and
        replaced by a new one that loads the restored checkpoint and follows the new trainer. Their counters
        so far are kept (``retired``); lending starts over (``lend_after_s`` again).
        """
        for name in self.lent():
            self.deadlines.get("call", self.router.remove_replica.remote(name, 0.0), "the router", "remove_replica")
        for name, handle in [*self.replicas.items(), *self._joining.values()]:
            self._retire(name)
            ray.kill(handle)
        self.replicas.clear()
        self.lending.clear()
        self._joining.clear()
        self._headroom.clear()
        self._syncs.clear()  # updates of the lost versions: nobody waits for them
        self._round.clear()
        self.hops.clear()
        self.trainer, self.policy_dir = trainer, policy_dir
        self._register()  # the new trainer encodes the site's shards too
        self._start_all(version)
        self.counters["restarts"] += 1

    # ---- lending ----------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Collect the headroom reports that arrived, act on the lending decisions, and ask again every poll_s."""
        self.site_slo.tick(self.replicas, self._on_death)
        self._joined()
        if self._headroom:
            ready, _ = ray.wait(list(self._headroom), num_returns=len(self._headroom), timeout=0)
            for ref in ready:
                name = self._headroom.pop(ref)
                try:
                    report = self.deadlines.get("call", ref, name, "headroom")  # ready
                except RayActorError:
                    self._on_death(name)
                    continue
                self._spans += report.pop("spans", [])
                if name in self.replicas:
                    self.reports[name] = report
                    self._decide(name, report["capacity"])
        now = time.monotonic()
        if not self._headroom and now - self._last_poll >= self.harvest.poll_s:
            self._last_poll = now
            self._headroom = {handle.headroom.remote(True): name for name, handle in self.replicas.items()}

    def _decide(self, name: str, capacity: int) -> None:
        action = self.lending[name].step(time.monotonic(), capacity)
        if action == "lend":
            ref = self.router.add_replica.remote(name, self.replicas[name], BORROWED_POOL, capacity)
            self.deadlines.get(REGISTERING, ref, "the router", "add_replica")
            self.counters["lends"] += 1
        elif action == "withdraw":
            ref = self.router.remove_replica.remote(name, self.harvest.drain_timeout_s)
            outcome = self.deadlines.get("train", ref, "the router", "remove_replica")  # drains first
            self.counters["withdrawals"] += 1
            self.counters["migrated_turns"] += outcome["aborted"]
            self.counters["drained_turns"] += outcome["drained"]
        elif action == "resize":
            self.router.set_capacity.remote(name, capacity)

    def lent(self) -> list[str]:
        return [name for name, policy in self.lending.items() if policy.lent]

    def registrations(self) -> list[tuple[str, Any, str, int]]:
        """What a restarted router must learn again of the borrowed site (``Workers.heal`` passes it on)."""
        return lent_registrations(self.lending, self.replicas, self.reports)

    # ---- weights ----------------------------------------------------------------------------------------
    def sync(self, payload: SyncPayload) -> list[Any]:
        """One copy of the update into the borrowed site, a shard to each owner, each fanned out inside the site;
        returns the refs to wait for (one per shard, or none without members)."""
        names = list(self.replicas)
        if not names or not self.harvest.lend:  # a site that is never lent needs no weights
            return []
        handles = dict(self.replicas)
        refs = []
        for layout, route in shard_routes(names, self.layouts, self.harvest.fanout):
            refs.append(handles[route.member].relay.remote(payload.of(layout), route, handles, "origin", True))
            self._syncs[refs[-1]] = route.member
        self._round, self._round_members, self._reached = set(refs), names, {name: set() for name in names}
        return refs

    def owns(self, ref: Any) -> bool:
        return ref in self._syncs

    def on_sync(self, ref: Any) -> None:
        """One shard's delivery ended; after the last one, members that missed a shard catch up from the trainer."""
        head = self._syncs.pop(ref)
        self._round.discard(ref)
        try:
            hops = self.deadlines.get("call", ref, head, "relay")  # ready
        except RayActorError:
            self._on_death(head)  # the members below it on this shard's route missed it: caught up below
        else:
            self.hops += hops
            for hop in hops:
                self._reached.setdefault(hop["target"], set()).add(hop["shard"])
        if not self._round:
            self._complete_round()

    def _complete_round(self) -> None:
        """Every member of the round that lacks a shard (a member on its route died) fetches what it lacks from the
        trainer now, so that the step ends with every live member holding the new version whole."""
        for name in self._round_members:
            if name not in self.replicas or self._reached.get(name, set()) >= set(self.layouts):
                continue
            try:
                caught = self.deadlines.get("train", self.replicas[name].catch_up.remote(), name, "catch_up")
            except RayActorError:
                self._on_death(name)
                continue
            self.hops.append(
                {
                    "source": "origin",
                    "target": name,
                    "cross_site": True,
                    "bytes": 0,
                    "catch_up_bytes": caught.bytes,
                    "full_copy": caught.full_copy,
                }
            )
        self._round_members, self._reached = [], {}

    def note_dedicated(self, name: str, nbytes: float) -> None:
        """A dedicated replica (the trainer's own site) received ``nbytes``."""
        self.hops.append(
            {
                "source": "origin",
                "target": name,
                "cross_site": False,
                "bytes": int(nbytes),
                "catch_up_bytes": 0,
                "full_copy": False,
            }
        )

    # ---- metrics ----------------------------------------------------------------------------------------
    def drain_spans(self) -> list[dict[str, Any]]:
        """The borrowed replicas' generate spans (role ``borrowed``), for the controller's timeline.jsonl: those
        that came with the headroom reports (every poll_s), and those since."""
        spans, self._spans = self._spans, []
        for name, ref in [(n, handle.drain_spans.remote()) for n, handle in self.replicas.items()]:
            try:
                spans.extend(self.deadlines.get("call", ref, name, "drain_spans"))
            except (RayActorError, ActorHung):
                continue  # a replica that died takes its unsent spans with it; tick() counts its death
        return spans

    def totals(self) -> Counter[str]:
        total = Counter(self.retired)
        for report in self.reports.values():
            total.update(counted(report))
        return total

    def step_metrics(self) -> dict[str, Any]:
        """This step's weight traffic by hop, and the harvest counters so far (metrics.jsonl).

        ``cross_site_bytes``: the encoded updates sent into the borrowed site (each shard to its owner, plus any
        catch-up from the trainer); ``in_site_bytes``: those forwarded member to member inside it. The dedicated
        replicas' fetches are in ``sync_hops`` (``origin->rollout-*``) and the controller's ``sync_bytes``.
        """
        hops, self.hops = self.hops, []
        per_hop: Counter[str] = Counter()
        for hop in hops:
            per_hop[f"{hop['source']}->{hop['target']}"] += hop["bytes"] + hop["catch_up_bytes"]
        totals = self.totals()
        return {
            **site_bytes(hops),  # cross_site_bytes, in_site_bytes, sync_full_copies: as bench weightsync counts
            "full_copy_bytes": self.full_copy_bytes,
            "sync_hops": dict(per_hop),
            "harvest_lent": len(self.lent()),
            **{f"harvest_{key}": value for key, value in self.counters.items()},
            **{f"harvest_{key}": totals[key] for key in COUNTED},
            # cumulative, like the counters above: the guard's decisions so far by cause, all replicas summed
            "harvest_guard_actions": self.guard_actions(totals),
        }

    def guard_actions(self, totals: Counter[str]) -> dict[str, int]:
        return guard_actions(totals, self.counters["withdrawals"])

    def summary(self) -> dict[str, Any]:
        """summary.json's harvest keys: ``harvest`` (the run's counters and each live replica's serving SLO),
        ``harvest_slo`` (the SLO the guards kept, and its calibration), ``harvest_guard_actions`` (by cause) and
        ``harvest_serving`` (the requests the live replicas served after the calibration, against that SLO)."""
        self.site_slo.finish(self.replicas, self._on_death)
        slo = self.site_slo.slo
        replicas = []
        served: list[RequestTiming] = []
        refs = {name: (handle.stats.remote(), handle.served_timings.remote()) for name, handle in self.replicas.items()}
        for name, (stats, timings) in refs.items():
            with contextlib.suppress(RayActorError, GetTimeoutError):
                stat, timed = ray.get([stats, timings], timeout=30)
                replicas.append(stat)
                served += [RequestTiming(*t) for t in timed["timings"]]
                continue
            replicas.append({"name": name, "lost": True})
        totals = self.totals()
        return {
            "harvest": {
                **dict(self.counters),
                **{key: totals[key] for key in COUNTED},
                "lent_at_end": self.lent(),
                "replicas": replicas,
            },
            "harvest_slo": self.site_slo.record,
            "harvest_guard_actions": self.guard_actions(totals),
            "harvest_serving": None if slo is None else serving_record(latencies(served), slo),
        }
