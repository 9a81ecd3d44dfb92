"""The t2i step loop: prompts → seeds (random, or chosen from explored ones) → on-policy groups → train → sync.

Per step ``s`` (trainer at version ``v``):

1. The step's prompts come from a schedule fixed by ``(seed, s)``. Each prompt has a list of candidate
   noise seeds, also fixed by ``(seed, s, prompt index)``; the baseline trains on the first ``G``.
2. With exploration, the explorer has already scored candidates for these prompts on version ``v − 1``
   (launched during the previous step's training). Per prompt the trainer's group is the ``G``
   candidates with the largest reward variance (``max_contrast_subset``). With a planner
   (``explore.planner: contrast``), the step's candidate budget is split over its prompts
   by the planner's scores of their arms (prompt templates); a prompt it gives no candidates trains on
   its first ``G`` seeds, as in the baseline.
3. The sampler draws the groups with version ``v`` (SDE, ``sample_steps``); the explorer starts on the
   next step's prompts with version ``v`` while the trainer trains; the trainer steps to ``v + 1``; the
   new weights go to both as a versioned ``rollarc.sync`` update (a delta, or a full copy for a
   receiver that cannot take it). With a planner, step ``s``'s observations (each prompt's contrast) are made
   from the sampler's fresh rewards *before* step ``s + 1``'s exploration is allocated and launched
   (:meth:`explore_next`), so each allocation uses every observation so far.

Logged per step: reward, near-zero-advantage fraction, Kendall τ between the explorer's stale and the
sampler's fresh rewards of the chosen seeds, the chosen groups' reward variance (stale and fresh) and
that of random groups (the first G candidates, stale), the explorer's staleness, clip fractions, the
sampler's SP degree (``sp_degree``), the weight sync's bytes and full copies over every hop reported
during the step (``sync_bytes``, ``sync_full_copies``; :meth:`T2IController.sync`) and, on spot
capacity, the fleet's cumulative counters (``spot_*``, SP regroups and joins included).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray.exceptions import RayActorError, RayError

from rollarc.algo.flow_grpo import low_contrast_fraction
from rollarc.diffusion.config import T2IConfig
from rollarc.diffusion.grids import save_grid
from rollarc.diffusion.tasks.registry import template_of
from rollarc.diffusion.trainer_loss import restart_point
from rollarc.models.checkpoint_retention import prune_checkpoints
from rollarc.models.checkpoint_write import checkpoint_directory
from rollarc.rayproc.deadline import Deadlines
from rollarc.report.metrics import MetricsWriter
from rollarc.report.run_dir import CHECKPOINTS, checkpoint_name
from rollarc.spotlight.contrast import ContrastPlanner
from rollarc.spotlight.groups import choose_groups, exploration_stats

SEED_SPACE = 1 << 31


def make_planner(cfg: T2IConfig) -> ContrastPlanner | None:
    """The planner ``explore.planner`` names (``None``: uniform, ``candidates`` per prompt)."""
    ex = cfg.explore
    return ContrastPlanner(ex.contrast_decay) if ex.planner == "contrast" else None


@dataclass
class T2IWorkers:
    trainer: Any
    sampler: Any
    explorer: Any | None
    fleet: Any | None = None  # a SpotFleet: exploration as pulled jobs on preemptible nodes (docs/spot.md)
    # a new trainer from a checkpoint (None: the run's starting policy), for one that was lost; None: not replaced
    restart_trainer: Callable[[Path | None, int], Any] | None = None  # (checkpoint, version) -> trainer


class T2IController:
    def __init__(
        self,
        cfg: T2IConfig,
        run_dir: Path,
        workers: T2IWorkers,
        train_prompts: list[str],
        heldout_prompts: list[str],
        metrics: MetricsWriter,
        start_step: int = 0,
        state: dict[str, Any] | None = None,
    ):
        self.cfg, self.run_dir, self.workers, self.metrics = cfg, run_dir, workers, metrics
        self.deadlines = Deadlines.of(cfg.cluster)
        self.train_prompts, self.heldout = train_prompts, heldout_prompts[: cfg.train.eval_prompts]
        self.step = self.start_step = start_step
        self.trainer_restarts = 0
        state = state or {}
        self.evals: list[dict[str, Any]] = list(state.get("evals", []))
        self.rl_wall_s = float(state.get("rl_wall_s", 0.0))
        self.clock_start = time.time() - float(state.get("wall_s", 0.0))  # the run clock continues across a resume
        self.explored_images = int(state.get("explored_images", 0))
        self.sampled_images = int(state.get("sampled_images", 0))
        self.planner = make_planner(cfg)
        self.fleet_synced = (0, 0)  # the spot workers' (bytes, full copies) already logged
        self.sync_bytes_total = int(state.get("sync_bytes_total", 0))
        if self.planner is not None:
            self.planner.load(state.get("arms", {}))

    # --- schedules fixed by the seed -------------------------------------------------------------
    def prompts_for(self, step: int) -> list[str]:
        rng = random.Random(f"{self.cfg.seed}/prompts/{step}")
        return [
            self.train_prompts[rng.randrange(len(self.train_prompts))] for _ in range(self.cfg.train.prompts_per_step)
        ]

    def candidates_for(self, step: int, index: int, count: int) -> list[int]:
        rng = random.Random(f"{self.cfg.seed}/seeds/{step}/{index}")
        return [rng.randrange(SEED_SPACE) for _ in range(count)]

    def arm_of(self, prompt: str) -> str:
        return template_of(prompt) if self.cfg.explore.arms == "template" else prompt

    def exploration_sizes(self, prompts: list[str]) -> list[int]:
        """Candidates per prompt: ``candidates`` each, or the same budget split by the planner (0: not explored)."""
        ex, size = self.cfg.explore, self.cfg.train.group_size
        if self.planner is None:
            return [ex.candidates] * len(prompts)
        arms = [self.arm_of(p) for p in prompts]
        return self.planner.allocate(arms, len(prompts) * ex.candidates, size, ex.chunk)

    def launch_exploration(self, step: int) -> tuple[Any, list[list[int]]] | None:
        explorer, fleet = self.workers.explorer, self.workers.fleet
        if (explorer is None and fleet is None) or step >= self.cfg.train.steps:
            return None
        prompts = self.prompts_for(step)
        seeds = [self.candidates_for(step, j, n) for j, n in enumerate(self.exploration_sizes(prompts))]
        if fleet is not None:
            return fleet.launch(prompts, seeds, self.cfg.train.sample_steps, fleet.version), seeds
        assert explorer is not None
        ref = explorer.explore.remote(prompts, seeds, self.cfg.train.sample_steps, self.cfg.train.noise_level)
        return ref, seeds

    def explore_next(
        self, prompts: list[str], stale: list[list[float]] | None, fresh: np.ndarray
    ) -> tuple[Any, list[list[int]]] | None:
        """Observe this step's prompts (if it was explored and a planner is on), then launch the next step's
        exploration, allocated with what was observed."""
        if stale is not None and self.planner is not None:
            arms = [self.arm_of(p) for p in prompts]
            self.planner.observe_step(arms, stale, fresh.tolist())
        return self.launch_exploration(self.step + 1)

    # --- the loop ----------------------------------------------------------------------------------
    def run(self, log: Any = print) -> dict[str, Any]:
        cfg, tc = self.cfg, self.cfg.train
        if not self.evals or self.evals[-1]["step"] != self.step:
            self.evaluate()
        pending = self.launch_exploration(self.step)
        while self.step < tc.steps:
            t0 = time.time()
            prompts = self.prompts_for(self.step)
            record: dict[str, Any] = {}
            explored_stale: list[list[float]] | None = None
            explored: dict[str, Any] | None = None
            if pending is not None:
                fleet = self.workers.fleet
                if fleet is not None:
                    explored = fleet.wait(pending[0])
                else:
                    explored = self.deadlines.get("train", pending[0], "the explorer", "explore")
                cand_seeds, stale = pending[1], explored["rewards"]
                explored_stale = stale
                self.explored_images += explored["images"]
                fallback = [self.candidates_for(self.step, j, tc.group_size) for j in range(len(prompts))]
                seeds, chosen_stale = choose_groups(cand_seeds, stale, fallback, tc.group_size)
                record["explorer_staleness"] = None
                record["explorer_version"] = explored["version"]
            else:
                seeds = [self.candidates_for(self.step, j, tc.group_size) for j in range(len(prompts))]
            flat_prompts = [p for p in prompts for _ in range(tc.group_size)]
            ref = self.workers.sampler.sample.remote(
                flat_prompts, [x for s in seeds for x in s], tc.sample_steps, tc.noise_level
            )
            sampled = self.deadlines.get("train", ref, "the sampler", "sample")
            self.sampled_images += len(flat_prompts)
            traj = sampled["trajectories"]
            rewards = np.array(sampled["rewards"]).reshape(len(prompts), tc.group_size)
            pending = self.explore_next(prompts, explored_stale, rewards)
            stats, synced = self.train_and_sync(traj, rewards.tolist(), explored)
            version = traj.version + 1
            record.update(synced)
            self.step += 1
            step_s = time.time() - t0
            self.rl_wall_s += step_s
            if "explorer_version" in record:
                record["explorer_staleness"] = traj.version - record.pop("explorer_version")
                record.update(self._exploration_stats(prompts, stale, chosen_stale, rewards))
            record.update(
                reward=float(rewards.mean()),
                reward_group_std=float(rewards.std(axis=1).mean()),
                low_contrast_fraction=low_contrast_fraction(torch.tensor(rewards), tc.low_contrast_tol),
                sample_version=traj.version,
                sp_degree=sampled["sp_degree"],
                step_s=step_s,
                rl_wall_s=self.rl_wall_s,
                sampled_images=self.sampled_images,
                explored_images=self.explored_images,
                **stats,
            )
            if self.workers.fleet is not None:  # cumulative: what preemptions cost so far (docs/spot.md)
                record.update({f"spot_{k}": v for k, v in self.workers.fleet.counters().items()})
            if self.step % tc.eval_every == 0 or self.step == tc.steps:
                record["heldout_reward"] = self.evaluate()["reward"]
            self.metrics.log(self.step, record)
            if cfg.run.progress:
                held = f" held-out {record['heldout_reward']:.3f}" if "heldout_reward" in record else ""
                log(
                    f"step {self.step}/{tc.steps} v{version}: reward {record['reward']:.3f} "
                    f"low-contrast {record['low_contrast_fraction']:.2f} ({step_s:.1f} s){held}"
                )
            if self.step % cfg.run.checkpoint_every == 0 or self.step == tc.steps:
                self.checkpoint((traj, rewards.tolist()))
        return self.summary()

    def train_and_sync(
        self, traj: Any, rewards: list[list[float]], explored: dict[str, Any] | None
    ) -> tuple[dict[str, float], dict[str, int]]:
        """Train on the step's samples and publish the new weights. A trainer lost meanwhile (a crash, a lost node)
        is replaced from the checkpoint of the step it started from (``rollarc.diffusion.trainer_loss``) and the step
        trained again on the same samples: nothing is redone but that one update."""
        for attempt in (0, 1):
            try:
                ref = self.workers.trainer.train.remote(traj, rewards)
                stats = self.deadlines.get("train", ref, "the trainer", "train")
                return stats, self.sync(traj.version + 1, explored)
            except RayError:
                if attempt or not self._trainer_lost():
                    raise
            self._replace_trainer(self.step)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _trainer_lost(self) -> bool:
        """The trainer is dead and can be replaced (a Ray error of another actor is not this one's to handle)."""
        if self.workers.restart_trainer is None:
            return False
        try:
            self.deadlines.get("call", self.workers.trainer.ping.remote(), "the trainer", "ping")
        except RayActorError:
            return True
        return False

    def _replace_trainer(self, step: int) -> None:
        """A new trainer at ``step``'s weights and optimizer (its checkpoint, or the run's start)."""
        assert self.workers.restart_trainer is not None
        checkpoint = restart_point(self.run_dir, step, self.start_step)
        self.workers.trainer = self.workers.restart_trainer(checkpoint, step)
        self.trainer_restarts += 1

    def sync(self, version: int, explored: dict[str, Any] | None) -> dict[str, int]:
        """Publish the trainer's new weights and bring the sampler (and the explorers that will use them) to them.

        The update is put into the object store once; the sampler applies it before the next step (waited
        for), the explorer after its running job (reported with its next exploration, so an explorer is
        only sent a version a later exploration will use), and spot workers fetch it from the fleet's queue
        when they pull a job of that version (reported through the queue). Returns this step's hops:
        ``sync_bytes`` and ``sync_full_copies`` over every receiver that reported during the step.
        """
        trainer, explorer, fleet = self.workers.trainer, self.workers.explorer, self.workers.fleet
        update = trainer.publish.remote()
        sampler = self.workers.sampler.sync_weights.remote(update, trainer, self.deadlines)
        if explorer is not None and self.step + 2 < self.cfg.train.steps:
            explorer.sync_weights.remote(update, trainer, self.deadlines)
        if fleet is not None:
            fleet.set_weights(update, trainer.full.remote(), version)
        got = self.deadlines.get("train", sampler, "the sampler", "sync_weights")
        nbytes, full = got["sync_bytes"], got["sync_full_copies"]
        if explored is not None and "sync_bytes" in explored:  # the explorer's hop, reported with its exploration
            nbytes += int(explored["sync_bytes"])
            full += int(explored["sync_full_copies"])
        if fleet is not None:
            spot = fleet.sync_totals()
            nbytes += spot[0] - self.fleet_synced[0]
            full += spot[1] - self.fleet_synced[1]
            self.fleet_synced = spot
        self.sync_bytes_total += nbytes
        return {
            "sync_version": got["version"],
            "sync_bytes": nbytes,
            "sync_full_copies": full,
            "sync_bytes_total": self.sync_bytes_total,
        }

    def _exploration_stats(
        self, prompts: list[str], stale: list[list[float]], chosen_stale: list[list[float] | None], fresh: np.ndarray
    ) -> dict[str, Any]:
        g = self.cfg.train.group_size
        out = exploration_stats(stale, chosen_stale, fresh.tolist(), g)
        if self.planner is not None:  # observed by explore_next
            out["planner_arms"] = len(self.planner.arms)
        return out

    def evaluate(self) -> dict[str, Any]:
        tc = self.cfg.train
        prompts = [p for p in self.heldout for _ in range(tc.eval_seeds)]
        seeds = [k for _ in self.heldout for k in range(tc.eval_seeds)]
        out = self.deadlines.get(
            "train", self.workers.sampler.evaluate.remote(prompts, seeds, tc.eval_steps), "the sampler", "evaluate"
        )
        result = {"step": self.step, "reward": float(np.mean(out["rewards"])), "rl_wall_s": self.rl_wall_s}
        self.evals.append(result)
        shown = list(range(0, min(len(prompts), 16 * tc.eval_seeds), tc.eval_seeds))[:16]
        save_grid(self.run_dir / "samples" / f"heldout_step_{self.step:05d}.png", out["images"][shown])
        if self.step == 0:
            (self.run_dir / "samples" / "prompts.txt").write_text("\n".join(prompts[i] for i in shown) + "\n")
        return result

    def checkpoint(self, retrain: tuple[Any, list[list[float]]] | None = None) -> Path:
        """``checkpoints/step_N`` written atomically (as the LLM path's: a crash leaves no half-written one).

        ``retrain``: the step's samples and rewards. A trainer lost while saving is replaced from the step
        before's checkpoint and trains the step again on them, then saves (the receivers keep the weights the
        lost one sent; the new one's next update reaches them as a full copy, its delta having another base)."""
        try:
            return self._save()
        except RayError:
            if retrain is None or not self._trainer_lost():
                raise
        self._replace_trainer(self.step - 1)
        self.deadlines.get("train", self.workers.trainer.train.remote(*retrain), "the trainer", "train")
        return self._save()

    def _save(self) -> Path:
        out = self.run_dir / CHECKPOINTS / checkpoint_name(self.step)
        with checkpoint_directory(out) as tmp:  # with its manifest; a full disk is DiskFull, one line
            self.deadlines.get("train", self.workers.trainer.save.remote(str(tmp)), "the trainer", "save")
            (tmp / "state.json").write_text(json.dumps(self.state(), indent=1))
        # older ones beyond the last keep_last_checkpoints go, never this one (a trainer restart needs only it)
        prune_checkpoints(out.parent, self.cfg.run.keep_last_checkpoints, out)
        return out

    def state(self) -> dict[str, Any]:
        """What a resume restores (the checkpoint's ``state.json``)."""
        return {
            "step": self.step,
            "version": self.step,
            "wall_s": time.time() - self.clock_start,
            "evals": self.evals,
            "rl_wall_s": self.rl_wall_s,
            "explored_images": self.explored_images,
            "sampled_images": self.sampled_images,
            "sync_bytes_total": self.sync_bytes_total,
            "arms": {} if self.planner is None else self.planner.state(),
        }

    def summary(self) -> dict[str, Any]:
        """The run's counts so far; the entry adds what the LLM path's summary has around them (run_dir.py)."""
        return {
            "name": self.cfg.name,
            "mode": "sync",  # on-policy: each step samples with the weights it trains
            "steps": self.step,
            "trainer_restarts": self.trainer_restarts,
            "wall_s": time.time() - self.clock_start,
            "heldout_reward_before_rl": self.evals[0]["reward"] if self.evals else None,
            "heldout_reward_after_rl": self.evals[-1]["reward"] if self.evals else None,
            "evals": self.evals,
            "rl_wall_s": self.rl_wall_s,
            "sampled_images": self.sampled_images,
            "explored_images": self.explored_images,
        }
