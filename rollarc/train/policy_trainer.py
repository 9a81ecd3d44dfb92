"""One RL training step on a batch of trajectories: the maths of a TrainWorker, with no Ray in it.

A training step produces exactly one new policy version. By default it is one optimiser step; with
``minibatches``/``epochs`` above 1 it is several, but only the weights at the end of the step are ever
published, so every generated token still carries the version of the weights that produced it.

Micro-batches (by token budget) accumulate gradients so memory stays bounded; their losses are
weighted so the minibatch loss equals the configured aggregation over the whole minibatch. Identical
rows share one forward pass (see ``_unique_rows``), which is exact and often several times cheaper.

Device and precision: the model is moved to ``device``; the batch and its bookkeeping stay on the CPU
and each micro-batch is copied to the device for its forward pass. With ``autocast_dtype=bfloat16``
the parameters, gradients and AdamW state stay float32 (the master weights) and only the forward
passes run under ``torch.autocast`` in bf16; log-probs and the loss are computed in float32.

LoRA (``adapter=True``, a ``peft.PeftModel``): only the trainable adapter parameters are given to the
optimiser, the KL reference is the same model with its adapters disabled (no second copy of the weights), and
``named_weights`` returns the adapter tensors only, which is all that weight sync sends.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from transformers import PreTrainedModel

from rollarc.agent.trajectory import Trajectory
from rollarc.algo.advantages import broadcast_to_tokens
from rollarc.algo.config import LossConfig
from rollarc.algo.logprobs import entropy_from_logits, token_logprobs
from rollarc.algo.lr_schedule import LrDecay, lr_multiplier
from rollarc.algo.minibatch_loss import policy_loss
from rollarc.algo.off_policy import needs_proximal_logprobs
from rollarc.train.batch import TrainBatch, build_batch, mask_stale_tokens
from rollarc.train.proximal import prox_from_loss_forward


class NonFiniteError(FloatingPointError):
    """A NaN/inf loss or gradient: the step is refused before the weights change."""


class PolicyTrainer:
    def __init__(
        self,
        model: PreTrainedModel,
        loss_cfg: LossConfig,
        lr: float,
        *,
        temperature: float = 1.0,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        grad_clip: float = 1.0,
        minibatches: int = 1,
        epochs: int = 1,
        micro_batch_tokens: int = 16384,
        pad_id: int = 0,
        seed: int = 0,
        version: int = 0,
        dedup: bool = True,
        warmup_steps: int = 0,
        lr_decay: LrDecay = "constant",
        total_steps: int = 0,
        lr_min_ratio: float = 1.0,
        device: torch.device | str | None = None,
        autocast_dtype: torch.dtype | None = None,
        max_staleness: int | None = None,
        adapter: bool = False,
    ):
        if device is not None:
            torch.nn.Module.to(model, device)  # in place; transformers' typed wrapper of .to rejects a device
        self.model = model.train()
        self.device = next(model.parameters()).device
        self.autocast_dtype = autocast_dtype if autocast_dtype not in (None, torch.float32) else None
        self.loss_cfg = loss_cfg
        self.temperature = temperature if temperature > 0 else 1.0
        self.grad_clip = grad_clip
        self.minibatches = minibatches
        self.epochs = epochs
        self.micro_batch_tokens = micro_batch_tokens
        self.pad_id = pad_id
        self.version = version
        self.max_staleness = max_staleness  # async.max_staleness: older tokens are masked out (None: never)
        self.dedup = dedup
        self.adapter = adapter
        # one optimiser step per step and no dropout: the loss forward's log-probs are pi_prox's (train/proximal.py)
        self.prox_from_loss = prox_from_loss_forward(model, loss_cfg, minibatches, epochs)
        trainable = [p for p in model.parameters() if p.requires_grad]  # every one, unless LoRA froze the base
        self.optimizer = torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay, betas=betas)
        # Linear warmup over the first training steps: Adam's first updates are about lr * sign(grad) for every
        # weight at once, which can knock a freshly fine-tuned policy off its feet. Then an optional decay to
        # lr * lr_min_ratio at step total_steps, so late, low-signal batches take small steps (algo/lr_schedule.py).
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            functools.partial(
                lr_multiplier,
                warmup_steps=warmup_steps,
                total_steps=total_steps,
                decay=lr_decay,
                min_ratio=lr_min_ratio,
            ),
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.ref_model = None
        if loss_cfg.kl_coef > 0 and not adapter:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)

    # ---- log-probs -------------------------------------------------------------------------------
    def _forward_logits(self, model: PreTrainedModel, batch: TrainBatch) -> torch.Tensor:
        """Logits ``[N, L-1, vocab]`` on the model's device (bf16 under autocast, else the model's dtype)."""
        autocast = (
            torch.autocast(self.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with autocast:
            return model(
                input_ids=batch.input_ids.to(self.device), attention_mask=batch.attention_mask.to(self.device)
            ).logits[:, :-1]

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch, model: PreTrainedModel | None = None) -> torch.Tensor:
        """Per-target log-probs of ``batch`` under ``model`` (default: the current policy), no gradient."""
        model = model or self.model
        reps, inverse = self._unique_rows(batch)
        unique = torch.zeros((len(reps), batch.behav_logp.shape[1]))
        for chunk in self._micro_batches(batch, reps):
            sub = batch.rows(chunk)
            logits = self._forward_logits(model, sub)
            logp = token_logprobs(logits, sub.input_ids[:, 1:].to(self.device), self.temperature)
            unique[inverse[chunk], : logits.shape[1]] = logp.float().cpu()
        return unique[inverse]

    def _reference_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """Log-probs under the KL reference: the frozen copy, or with LoRA the base (adapters disabled)."""
        if self.adapter:
            with self.model.disable_adapter():  # a peft.PeftModel's context manager
                return self.logprobs(batch)
        assert self.ref_model is not None
        return self.logprobs(batch, self.ref_model)

    def _unique_rows(self, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """One representative row per distinct token sequence, and each row's class.

        GRPO samples ``G`` rollouts of the same task, and with a short history window many turns see the
        very same prompt (the same start state, the same states along similar paths). A row's logits depend
        only on its own tokens, so identical rows need one forward pass; the loss is still computed on every
        row (each with its own advantage, behaviour log-probs and version), so the gradient is exact.
        Returns ``(reps, inverse)``: ``reps[u]`` is the first row of class ``u``, ``inverse[i]`` the class of row ``i``.
        """
        n = batch.num_rows
        if not self.dedup:
            return torch.arange(n), torch.arange(n)
        key = torch.cat([batch.input_ids, batch.attention_mask], dim=1)
        _, inverse = torch.unique(key, dim=0, return_inverse=True)
        reps = torch.full((int(inverse.max()) + 1,), n, dtype=torch.long)
        reps.scatter_reduce_(0, inverse, torch.arange(n), reduce="amin")
        return reps, inverse

    # ---- the step --------------------------------------------------------------------------------
    def train_step(self, groups: list[list[Trajectory]]) -> dict[str, Any]:
        """Advantages within each group, then the clipped policy loss; returns statistics."""
        start = time.perf_counter()
        bad = [t.traj_id for g in groups for t in g if not torch.isfinite(torch.tensor(t.reward))]
        if bad:
            raise NonFiniteError(
                f"non-finite reward in trajectories {bad[:3]} at version {self.version}; refusing to train on it"
            )
        batch = build_batch(groups, self.loss_cfg.advantage, self.loss_cfg.eps, self.pad_id)
        generated = batch.num_target_tokens
        masked = mask_stale_tokens(batch, self.version, self.max_staleness)
        recompute = needs_proximal_logprobs(self.loss_cfg.correction) and not self.prox_from_loss
        logp_prox = self.logprobs(batch) if recompute else None
        ref_logp = self._reference_logprobs(batch) if self.loss_cfg.kl_coef > 0 else None
        self.model.train()
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(self.epochs):
            order = torch.randperm(batch.num_rows, generator=self.generator)
            for mini in order.chunk(min(self.minibatches, batch.num_rows)):
                stats = self._optimizer_step(batch, mini, logp_prox, ref_logp)
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                steps += 1
        self.version += 1
        result = {key: value / steps for key, value in totals.items()}
        result["lr"] = float(self.scheduler.get_last_lr()[0])
        self.scheduler.step()
        stale = batch.versions[batch.loss_mask.bool()]
        result.update(
            {
                "version": self.version,
                "optimizer_steps": steps,
                "rows": batch.num_rows,
                "target_tokens": batch.num_target_tokens,
                "tokens": int(batch.attention_mask.sum().item()),
                "train_s": time.perf_counter() - start,
                # groups whose rewards differ: only these carry a gradient (an all-equal group's advantage is 0)
                "signal_groups_frac": sum(len({t.reward for t in g}) > 1 for g in groups) / max(1, len(groups)),
                "token_staleness_max": float((self.version - 1) - stale.min().item()) if stale.numel() else 0.0,
                "token_staleness_min": float((self.version - 1) - stale.max().item()) if stale.numel() else 0.0,
                # tokens older than max_staleness, taken out of the loss (their group had fresher ones)
                "masked_stale_tokens": masked,
                "masked_token_frac": masked / max(1, generated),
                # 1 when pi_prox's log-probs took a forward of their own (0: the loss forward's, or not needed)
                "prox_forwards": int(recompute),
            }
        )
        return result

    def _optimizer_step(
        self, batch: TrainBatch, rows: torch.Tensor, logp_prox: torch.Tensor | None, ref_logp: torch.Tensor | None
    ) -> dict[str, float]:
        mini = batch.rows(rows)
        total_tokens = max(1.0, float(mini.loss_mask.sum().item()))
        total_rows = max(1.0, float((mini.loss_mask.sum(dim=1) > 0).sum().item()))
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        reps, inverse = self._unique_rows(mini)
        lookup = torch.full((len(reps),), -1, dtype=torch.long)
        for chunk in self._micro_batches(mini, reps):
            # forward each distinct sequence of the chunk once; compute the loss on every row it stands for
            classes = inverse[chunk]
            lookup[classes] = torch.arange(len(chunk))
            local = torch.isin(inverse, classes).nonzero()[:, 0]
            micro = mini.rows(local)
            width = micro.loss_mask.shape[1]
            logits = self._forward_logits(self.model, mini.rows(chunk))[lookup[inverse[local]].to(self.device), :width]
            index = rows[local]
            dev = self.device
            logp = token_logprobs(logits, micro.input_ids[:, 1:].to(dev), self.temperature)
            prox: torch.Tensor | None
            if self.prox_from_loss:  # the weights of this forward are the step's start (one optimiser step)
                prox = logp.detach()
            else:
                prox = None if logp_prox is None else logp_prox[index, :width].to(dev)
            need_entropy = self.loss_cfg.entropy_coef > 0
            entropy = entropy_from_logits(logits, self.temperature) if need_entropy else None
            loss_mask = micro.loss_mask.to(dev)
            loss, stats = policy_loss(
                logp,
                micro.behav_logp.to(dev),
                prox,
                broadcast_to_tokens(micro.advantages.to(dev), loss_mask),
                loss_mask,
                self.loss_cfg,
                ref_logp=None if ref_logp is None else ref_logp[index, :width].to(dev),
                entropy=entropy,
            )
            if self.loss_cfg.agg == "token_mean":
                weight = float(micro.loss_mask.sum().item()) / total_tokens
            else:
                weight = float((micro.loss_mask.sum(dim=1) > 0).sum().item()) / total_rows
            self._check_loss(loss)
            (loss * weight).backward()
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value) * weight
        sums["unique_rows_frac"] = len(reps) / max(1, mini.num_rows)
        grad_norm = self._clip_gradients()
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteError(f"gradient norm is {grad_norm.item()} at version {self.version}; the step is refused")
        self.optimizer.step()
        sums["grad_norm"] = float(grad_norm.item())
        return sums

    def _check_loss(self, loss: torch.Tensor) -> None:
        """Refuse a non-finite micro-batch loss before its backward pass (FSDP ranks defer this to agree)."""
        if not torch.isfinite(loss):
            raise NonFiniteError(f"loss is {loss.item()} at version {self.version}; the step is refused")

    def _clip_gradients(self) -> torch.Tensor:
        """Clip the gradient to ``grad_clip`` in global norm; returns the norm before clipping."""
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)

    def _micro_batches(self, batch: TrainBatch, rows: torch.Tensor) -> list[torch.Tensor]:
        """Split ``rows`` into groups whose padded size stays under the token budget (longest first)."""
        lengths = batch.attention_mask[rows].sum(dim=1)
        order = rows[torch.argsort(lengths, descending=True)]
        groups: list[torch.Tensor] = []
        current: list[int] = []
        longest = 0
        for row in order.tolist():
            length = int(batch.attention_mask[row].sum().item())
            if current and max(longest, length) * (len(current) + 1) > self.micro_batch_tokens:
                groups.append(torch.tensor(current))
                current, longest = [], 0
            current.append(row)
            longest = max(longest, length)
        if current:
            groups.append(torch.tensor(current))
        return groups

    # ---- weights and state -----------------------------------------------------------------------
    def named_weights(self) -> dict[str, torch.Tensor]:
        """The weights on the CPU (a no-op copy when training on the CPU), as weight sync expects them.

        With LoRA, the adapter tensors only (named as in PEFT's ``adapter_model.safetensors``).
        """
        if self.adapter:
            from rollarc.train.lora import adapter_state  # deferred: peft is needed only with model.lora

            return adapter_state(self.model)  # a peft.PeftModel
        return {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}

    def save_reference(self, path: str | Path) -> None:
        """The frozen KL reference, saved in a checkpoint: a resumed run starts its actors from the checkpoint's
        policy, so without this its reference would be a copy of the resumed weights, not the original one."""
        if self.ref_model is not None:
            save_model(self.ref_model, str(path))

    def load_reference(self, path: str | Path) -> None:
        if self.ref_model is None:
            return
        if not Path(path).is_file():
            raise FileNotFoundError(
                f"{path} does not exist: the checkpoint holds no KL reference (algo.kl_coef > 0 needs one); "
                "it was written by an older rollarc or with algo.kl_coef: 0"
            )
        load_model(self.ref_model, str(path), device=str(self.device))

    def optimizer_state(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
            "generator": self.generator.get_state(),
        }

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
        self.generator.set_state(state["generator"])
