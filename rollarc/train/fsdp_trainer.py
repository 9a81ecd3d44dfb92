"""``ShardedPolicyTrainer``: the one-rank ``PolicyTrainer`` step, run by every rank of an FSDP2 process group.

Every rank builds the same whole batch from the same groups (advantages on whole groups), draws the same
minibatch order (same seed) and so knows each minibatch's loss normaliser exactly as one rank would. Only
the distinct rows of a minibatch are divided, token-balanced (:mod:`rollarc.train.fsdp_split`); a rank
forwards and back-propagates its share, each micro-batch loss weighted by its share of the *whole*
minibatch normaliser, and FSDP sums the gradients across ranks: the one-rank gradient, up to the order of
float additions. Three things keep the ranks in lock-step, since every forward and backward pass of a
sharded model is a collective:

- a rank with fewer micro-batches runs zero-weight padding passes, so all ranks run as many;
- a non-finite loss is not raised at once but agreed on by all ranks before the optimiser step;
- statistics (token-weighted sums of per-rank shares) are summed across ranks.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from transformers import PreTrainedModel

from rollarc.algo.config import LossConfig
from rollarc.train.batch import TrainBatch
from rollarc.train.fsdp import full_state_dict, load_sharded, local_tensor, save_sharded, shard_model
from rollarc.train.fsdp_split import balanced_partition
from rollarc.train.policy_trainer import NonFiniteError, PolicyTrainer

# Statistics every rank already holds for the whole minibatch (not to be summed across ranks).
WHOLE_MINIBATCH_STATS = ("unique_rows_frac", "grad_norm")


class ShardedPolicyTrainer(PolicyTrainer):
    """A ``PolicyTrainer`` on one rank of an initialised process group; its model is sharded in place."""

    def __init__(
        self,
        model: PreTrainedModel,
        loss_cfg: LossConfig,
        lr: float,
        *,
        reshard_after_forward: bool = True,
        **kwargs: Any,
    ):
        if not dist.is_initialized():
            raise RuntimeError("ShardedPolicyTrainer needs an initialised process group (rollarc.train.fsdp)")
        super().__init__(model, loss_cfg, lr, **kwargs)  # the frozen reference model is copied while still whole
        names = {id(p): name for name, p in model.named_parameters()}
        groups = [[names[id(p)] for p in group["params"]] for group in self.optimizer.param_groups]
        shard_model(model, reshard_after_forward=reshard_after_forward)
        sharded = dict(model.named_parameters())
        for group, group_names in zip(self.optimizer.param_groups, groups, strict=True):
            group["params"] = [sharded[name] for name in group_names]  # the optimiser now steps the shards
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._padding = 0
        self._bad_loss: float | None = None

    # ---- the work split --------------------------------------------------------------------------
    def _micro_batches(self, batch: TrainBatch, rows: torch.Tensor) -> list[torch.Tensor]:
        """This rank's micro-batches of ``rows``; notes how many padding passes keep the ranks in step."""
        costs = batch.attention_mask[rows].sum(dim=1).tolist()
        parts = balanced_partition(costs, self.world_size)
        chunks = [
            super(ShardedPolicyTrainer, self)._micro_batches(batch, rows[torch.tensor(part, dtype=torch.long)])
            for part in parts
        ]
        self._padding = max(len(c) for c in chunks) - len(chunks[self.rank])
        return chunks[self.rank]

    def _padding_passes(self, model: torch.nn.Module, backward: bool) -> None:
        """Forward (and backward) passes of weight zero on a 2-token row: collectives without any effect."""
        padding, self._padding = self._padding, 0
        if not isinstance(model, FSDPModule):
            return  # an unsharded model (the frozen reference) runs no collective
        device = _device_of(model)
        for _ in range(padding):
            ids = torch.full((1, 2), self.pad_id, dtype=torch.long, device=device)
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            if backward:
                (logits.sum() * 0.0).backward()

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch, model: PreTrainedModel | None = None) -> torch.Tensor:
        """Each rank computes its share of the rows; the sum over ranks fills every row exactly once."""
        model = model or self.model
        result = super().logprobs(batch, model)
        self._padding_passes(model, backward=False)
        dist.all_reduce(result)  # every other rank holds exact zeros in this rank's rows: x + 0.0 == x
        return result

    # ---- the step --------------------------------------------------------------------------------
    def _check_loss(self, loss: torch.Tensor) -> None:
        if not torch.isfinite(loss) and self._bad_loss is None:
            self._bad_loss = float(loss.item())  # raised after every rank has finished its passes

    def _clip_gradients(self) -> torch.Tensor:
        self._padding_passes(self.model, backward=True)
        bad = torch.tensor([0.0 if self._bad_loss is None else 1.0])
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item() > 0:
            local, self._bad_loss = self._bad_loss, None
            self.optimizer.zero_grad(set_to_none=True)
            where = f"loss is {local}" if local is not None else "the loss of another rank is not finite"
            raise NonFiniteError(f"{where} at version {self.version}; the step is refused")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        return local_tensor(norm).cpu()

    def _optimizer_step(
        self, batch: TrainBatch, rows: torch.Tensor, logp_prox: torch.Tensor | None, ref_logp: torch.Tensor | None
    ) -> dict[str, float]:
        stats = super()._optimizer_step(batch, rows, logp_prox, ref_logp)
        gathered: list[dict[str, float] | None] = [None] * self.world_size
        dist.all_gather_object(gathered, stats)
        parts = [part or {} for part in gathered]
        keys = sorted(set().union(*parts))
        return {
            key: stats[key] if key in WHOLE_MINIBATCH_STATS else sum(p.get(key, 0.0) for p in parts) for key in keys
        }

    # ---- weights and state -----------------------------------------------------------------------
    def named_weights(self) -> dict[str, torch.Tensor]:
        """The whole weights on CPU, on rank 0 only (an empty dict elsewhere); a collective."""
        return full_state_dict(self.model)

    def save_sharded(self, path: str) -> None:
        """Model and optimiser shards of this rank under ``path`` (a collective; same path on every rank)."""
        save_sharded(path, self.model, self.optimizer)

    def load_sharded(self, path: str) -> None:
        load_sharded(path, self.model, self.optimizer)

    def loop_state(self) -> dict[str, Any]:
        """What the sharded checkpoint does not hold: scheduler, version and minibatch-order generator."""
        return {
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
            "generator": self.generator.get_state(),
        }

    def load_loop_state(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
        self.generator.set_state(state["generator"])


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
