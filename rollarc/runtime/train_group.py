"""The train role as ``N`` FSDP2 ranks: one Ray actor per rank, rank 0 speaking for the group.

``start_train_group`` places ``cluster.roles.train.replicas`` rank actors on the train pool, has rank 0 pick a
free port on its node and joins them in one process group (gloo on CPUs, NCCL on GPUs). Rank 0 then offers
exactly the ``TrainWorker`` interface (``train_step``, ``publish``, ``fetch_weights``, ``version``,
``save_checkpoint``, ``load_checkpoint``, ``drain_spans``), so the controller and the rollout workers use it as
they use a single trainer. Each of those calls starts the same collective on every peer rank first, then runs
rank 0's own part. The whole weights are gathered once per version onto rank 0 and published there through
the ``WeightPublisher`` (full or delta), as by the single trainer.

A checkpoint directory holds ``sharded/`` (torch DCP: every rank's model and optimiser shards), ``policy/``
(the gathered weights as an HF directory, which is also what a resumed run starts its actors from),
``trainer_state.pt`` (scheduler, version, minibatch-order generator), ``reference.safetensors`` (the frozen KL
reference, when ``algo.kl_coef > 0``) and ``state.json``; it is written
atomically, as by the single trainer. All ranks must see the same file system.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import ray
import torch

from rollarc.agent.trajectory import Trajectory
from rollarc.config import Config
from rollarc.models.checkpoint import REFERENCE_FILE, load_policy, load_state_file, save_state_file
from rollarc.models.checkpoint_write import checkpoint_directory
from rollarc.models.device import resolve_device
from rollarc.rayproc.deadline import Deadlines
from rollarc.report.metrics import process_rss_mb
from rollarc.runtime.ray_cluster import actor_options
from rollarc.runtime.train_worker import latest_payload, register_site, sync_span
from rollarc.runtime.weight_sync import SyncPayload
from rollarc.sync.shard import ShardSpec
from rollarc.sync.versions import WHOLE, VersionedUpdate, WeightPublisher
from rollarc.train.fsdp import SHARDED_DIR, free_port, init_process_group
from rollarc.train.fsdp_trainer import ShardedPolicyTrainer
from rollarc.train.trainer_options import trainer_options

FSDP_META = "fsdp.json"  # records the number of ranks that wrote a checkpoint


def start_train_group(cfg: Config, policy_dir: str, *, gpus: bool = False) -> Any:
    """Start the rank actors, join them in one process group and return rank 0's handle (the group's voice).

    ``gpus`` (from ``uses_gpus``): each rank on a GPU-kind pool reserves its GPUs, as the single trainer does.
    """
    role = cfg.cluster.roles.train
    ranks = [
        FSDPTrainRank.options(  # type: ignore[attr-defined]  # @ray.remote class
            **actor_options(cfg.cluster, role, gpus=gpus)
        ).remote(rank, role.replicas)
        for rank in range(role.replicas)
    ]
    deadlines = Deadlines.of(cfg.cluster)
    nodes = deadlines.get_each("start", {f"FSDP rank {i}": r.node.remote() for i, r in enumerate(ranks)}, "node")
    # All on one node: the rendezvous listens on the loopback only. Across nodes: on rank 0's node address.
    host = "127.0.0.1" if len({node_id for node_id, _ in nodes}) == 1 else nodes[0][1]
    port = deadlines.get("call", ranks[0].pick_port.remote(host), "FSDP rank 0", "pick_port")
    setups = {f"FSDP rank {i}": r.setup.remote(policy_dir, cfg, role.threads, host, port) for i, r in enumerate(ranks)}
    deadlines.get_each("start", setups, "setup")
    deadlines.get("start", ranks[0].lead.remote(ranks[1:]), "FSDP rank 0", "lead")
    return ranks[0]


@ray.remote
class FSDPTrainRank:
    def __init__(self, rank: int, world_size: int):
        self.rank = rank
        self.world_size = world_size
        self.peers: list[Any] = []
        self.publisher: WeightPublisher | None = None
        self._spans: list[dict[str, Any]] = []

    def node(self) -> tuple[str, str]:
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def pick_port(self, host: str) -> int:
        return free_port(host)

    def setup(self, policy_dir: str, cfg: Config, threads: int, host: str, port: int) -> None:
        """Join the process group, load the policy and shard it (every rank at once)."""
        torch.set_num_threads(threads)
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        device = resolve_device(cfg.model.device)
        init_process_group(self.rank, self.world_size, host, port, device)
        model, self.tokenizer = load_policy(policy_dir)
        self.trainer = ShardedPolicyTrainer(
            model,
            cfg.algo,
            cfg.train.lr,
            reshard_after_forward=cfg.train.fsdp.reshard_after_forward,
            **trainer_options(cfg, self.tokenizer.pad_token_id),
        )

    # ---- the parts every rank runs (collectives) -------------------------------------------------
    def rank_train_step(self, groups: list[list[Trajectory]], step: int) -> dict[str, Any]:
        t0 = time.time()
        stats = self.trainer.train_step(groups)
        stats["rss_mb"] = process_rss_mb()
        self._spans.append(
            {
                "worker": f"train-{self.rank}",
                "role": "train",
                "kind": "train",
                "t0": t0,
                "t1": time.time(),
                "step": step,
                "tokens": stats["tokens"],
            }
        )
        return stats

    def rank_gather(self) -> None:
        """Gather the whole weights; rank 0 publishes them as the trainer's current version."""
        weights = self.trainer.named_weights()
        if self.rank == 0:
            if self.publisher is None:
                self.publisher = WeightPublisher(self.cfg.sync)
            self.publisher.publish(weights, version=self.trainer.version)

    def rank_save(self, directory: str) -> dict[str, torch.Tensor]:
        """This rank's shards into ``directory/sharded``; returns the gathered whole weights (rank 0 only)."""
        self.trainer.save_sharded(str(Path(directory) / SHARDED_DIR))
        return self.trainer.named_weights()

    def rank_load(self, path: str) -> None:
        self.trainer.load_sharded(str(Path(path) / SHARDED_DIR))
        self.trainer.load_loop_state(load_state_file(Path(path) / "trainer_state.pt"))
        self.trainer.load_reference(Path(path) / REFERENCE_FILE)  # every rank holds the whole reference

    def rank_spans(self) -> list[dict[str, Any]]:
        spans, self._spans = self._spans, []
        return spans

    def _on_all(self, method: str, *args: Any) -> Any:
        """Start ``method`` on every peer, run it here, then wait for the peers (a failure anywhere raises)."""
        refs = [getattr(peer, method).remote(*args) for peer in self.peers]
        result = getattr(self, method)(*args)
        self._wait_peers(refs, method)
        return result

    def _wait_peers(self, refs: list[Any], method: str) -> None:
        """The peers' parts of a collective, within ``cluster.train_timeout_s``: a hung peer is named."""
        named = {f"FSDP rank {i + 1}": ref for i, ref in enumerate(refs)}
        Deadlines.of(self.cfg.cluster).get_each("train", named, method)

    # ---- rank 0: the TrainWorker interface -------------------------------------------------------
    def lead(self, peers: list[Any]) -> None:
        """Rank 0 takes the other ranks' handles and publishes the starting weights."""
        self.peers = peers
        self._on_all("rank_gather")

    def train_step(self, groups: list[list[Trajectory]], step: int) -> dict[str, Any]:
        groups_ref = ray.put(groups)  # one copy in the object store for every peer
        refs = [peer.rank_train_step.remote(groups_ref, step) for peer in self.peers]
        stats = self.rank_train_step(groups, step)
        self._wait_peers(refs, "rank_train_step")
        stats["train_ranks"] = self.world_size
        return stats

    def publish(self) -> SyncPayload:
        """Gather the version just trained onto rank 0, publish it (full or delta) and put it in the object store."""
        t0 = time.time()
        self._on_all("rank_gather")
        assert self.publisher is not None
        payload = latest_payload(self.publisher, self.trainer.version, self.cfg.sync.method)
        self._spans.append(sync_span(t0, self.trainer.version))
        return payload

    def fetch_weights(self, have: int | None, layout: ShardSpec = WHOLE) -> tuple[VersionedUpdate, ...]:
        assert self.publisher is not None
        return self.publisher.fetch(layout, have)

    def register_site(self, world: int) -> dict[str, Any]:
        """Encode each update in ``world`` shards for the borrowed site too (``TrainWorker.register_site``)."""
        assert self.publisher is not None
        return register_site(self.publisher, world)

    def version(self) -> int:
        return self.trainer.version

    def gathered_weights(self) -> dict[str, torch.Tensor]:
        """The whole weights as last published (for checks: what rollout workers received)."""
        assert self.publisher is not None
        return self.publisher.shard(WHOLE)

    def save_checkpoint(self, path: str, controller_state: dict[str, Any]) -> str:
        """Sharded model and optimiser, an HF export of the gathered weights, loop and controller state."""
        with checkpoint_directory(path) as tmp:
            weights = self._on_all("rank_save", str(tmp))
            self.trainer.model.save_pretrained(tmp / "policy", state_dict=weights, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp / "policy")
            save_state_file(self.trainer.loop_state(), tmp / "trainer_state.pt")
            self.trainer.save_reference(tmp / REFERENCE_FILE)
            (tmp / FSDP_META).write_text(json.dumps({"ranks": self.world_size}))
            (tmp / "state.json").write_text(json.dumps(controller_state, indent=1))
        return path

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        path_ = Path(path)
        if not (path_ / SHARDED_DIR).is_dir():
            raise ValueError(
                f"{path} was written by the single-replica trainer (no {SHARDED_DIR}/ directory); "
                "resume it with cluster.roles.train.replicas=1 and train.fsdp.on_one_replica=false"
            )
        self._on_all("rank_load", path)
        layouts = self.publisher.layouts if self.publisher is not None else []
        self.publisher = WeightPublisher(self.cfg.sync)
        self._on_all("rank_gather")
        for layout in layouts:  # the borrowed site's, if registered: still encoded after the load
            self.publisher.register(layout)
        return json.loads((path_ / "state.json").read_text())

    def drain_spans(self) -> list[dict[str, Any]]:
        spans = self.rank_spans()
        named = {f"FSDP rank {i + 1}": peer.rank_spans.remote() for i, peer in enumerate(self.peers)}
        for part in Deadlines.of(self.cfg.cluster).get_each("call", named, "rank_spans"):
            spans.extend(part)
        return spans
