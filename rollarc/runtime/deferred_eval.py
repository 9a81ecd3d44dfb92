"""Held-out evaluations off the critical path (``train.eval_deferred``): snapshot a step's weights now, score later.

A live evaluation pauses the run between steps: the controller waits for its episodes on the rollout workers, and
an asynchronous run's pipeline drains and refills around it (on ``configs/gentail.yaml`` an evaluation every 2
steps took k = 2 from 1.47x to 1.12x of synchronous training per run; docs/async.md). Deferred, a step's
evaluation asks the trainer for its version and its whole weights (two calls, served in order before any later
step, so the weights are that version's; the driver keeps only the reference and does not wait) and scores them
at the run's next checkpoint (so a checkpoint's state holds every evaluation up to it) and at its end.

Scoring runs in the driver, on the built-in engine with ``train.eval_threads`` threads, through
``rollarc.agent.local_eval``: the same ``EpisodeRunner``, held-out seeds and temperature as a live evaluation,
so a snapshot scores what the live evaluation of that version would. Not a concurrent evaluator actor: on the
2 cores this project measures on, one would take cores from the very training it times; with spare hardware a
concurrent evaluator is the next step. Each record carries the step's ``wall_s`` (when its weights existed),
``deferred: true`` and ``scored_at``: the version after which the driver paused to score it. Time to target
(``rollarc.bench.time_to_target``) counts that pause as it counts a live evaluation's.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollarc.agent.local_eval import heldout_specs, run_local
from rollarc.config import Config
from rollarc.models.checkpoint import load_policy
from rollarc.models.device import resolve_device, resolve_dtype
from rollarc.rayproc.deadline import Deadlines
from rollarc.runtime.heldout_eval import evaluation_record
from rollarc.runtime.run_errors import RunError


@dataclass(frozen=True)
class Snapshot:
    """A step's weights, not yet scored: ``weights`` is the trainer's pending ``gathered_weights`` result."""

    version: int
    wall_s: float  # the run clock when the step ended (its metrics row's wall_s)
    weights: Any  # ray.ObjectRef[dict[str, torch.Tensor]]


class SnapshotMismatch(RunError):
    """The trainer held another version than the step being evaluated (an internal error): its weights would be
    mislabelled."""


class DeferredEvals:
    """The snapshots of a run's step evaluations, and their scoring in this process."""

    def __init__(self, cfg: Config, policy_dir: str, deadlines: Deadlines):
        self.cfg = cfg
        self.policy_dir = policy_dir  # the run's starting policy: the architecture the snapshots' weights fit
        self.deadlines = deadlines
        self.pending: list[Snapshot] = []
        self._model: tuple[PreTrainedModel, PreTrainedTokenizerBase] | None = None

    def snapshot(self, trainer: Any, version: int, wall_s: float) -> None:
        """Take ``version``'s weights from ``trainer`` (which must hold that version; raises RayActorError if
        it is dead)."""
        held = self.deadlines.get("call", trainer.version.remote(), "the trainer", "version")
        if held != version:
            raise SnapshotMismatch(
                f"internal error: deferred evaluation of step {version}: the trainer holds version {held}"
            )
        self.pending.append(Snapshot(version, wall_s, trainer.gathered_weights.remote()))

    def discard(self) -> None:
        """The trainer was lost: the pending snapshots' steps are redone (and snapshotted again)."""
        self.pending.clear()

    def score(self, scored_at: int) -> list[dict[str, Any]]:
        """Score every pending snapshot, oldest first, as the run pauses after version ``scored_at``; raises
        RayActorError if the trainer died before it gave a snapshot's weights."""
        records = []
        while self.pending:
            snap = self.pending[0]
            weights = self.deadlines.get("call", snap.weights, "the trainer", "gathered_weights")
            records.append(self.score_weights(snap.version, snap.wall_s, weights, scored_at))
            self.pending.pop(0)
        return records

    def score_weights(
        self, version: int, wall_s: float, weights: dict[str, torch.Tensor], scored_at: int
    ) -> dict[str, Any]:
        """The held-out evaluation of ``version``'s ``weights``, as a live one would record it, marked deferred."""
        cfg, t = self.cfg, self.cfg.train
        t0 = time.time()
        model, tokenizer = self._policy()
        load_weights(model, weights)
        label = f"step_{version}"
        specs = heldout_specs(list(cfg.tasks), t.eval_episodes, t.eval_seed_base, f"eval-{label}", t.eval_temperature)
        engine = cfg.engine.model_copy(update={"num_threads": t.eval_threads})
        trajs = asyncio.run(run_local(model, tokenizer, list(cfg.tasks), specs, cfg.sampling, engine))
        record = evaluation_record(cfg, label, version, trajs, time.time() - t0, wall_s)
        return {**record, "deferred": True, "scored_at": scored_at}

    def _policy(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """The model the snapshots are loaded into, built once from the run's starting policy."""
        if self._model is None:
            model, tokenizer = load_policy(self.policy_dir)
            device = resolve_device(self.cfg.model.device)
            dtype = resolve_dtype(self.cfg.engine.dtype or self.cfg.model.dtype)
            self._model = (model.to(device, dtype), tokenizer)  # type: ignore[arg-type]  # transformers' typed .to
        return self._model


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` into ``model`` in place; refuses (before copying anything) names or shapes that differ."""
    own = model.state_dict()
    missing, unknown = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
    if missing or unknown:
        raise ValueError(f"snapshot weights do not fit the policy: missing {missing[:3]}, unknown {unknown[:3]}")
    shapes = [name for name, tensor in weights.items() if tuple(tensor.shape) != tuple(own[name].shape)]
    if shapes:
        raise ValueError(f"snapshot weights do not fit the policy: shapes differ for {shapes[:3]}")
    with torch.no_grad():
        for name, tensor in weights.items():
            own[name].copy_(tensor)
