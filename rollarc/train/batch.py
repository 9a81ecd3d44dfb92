"""Turn finished GRPO groups into padded training tensors.

Each trajectory segment becomes one row. Tensors are aligned to *targets*: column ``t`` holds what
``logits[:, t]`` predicts, i.e. token ``t + 1`` of the row (``input_ids[:, t + 1]``), its assistant
mask, its behaviour log-prob and its policy version. A trajectory's advantage is broadcast to all its
assistant tokens; environment tokens have mask 0 and never carry gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollarc.agent.trajectory import NO_VERSION, Trajectory
from rollarc.algo.advantages import group_advantages
from rollarc.algo.kinds import AdvantageKind


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [N, L] int64, right-padded with pad_id
    attention_mask: torch.Tensor  # [N, L] int64
    loss_mask: torch.Tensor  # [N, L-1] float: 1 where the target is an assistant token
    behav_logp: torch.Tensor  # [N, L-1] float: behaviour log-prob of each target token
    versions: torch.Tensor  # [N, L-1] int64: version of each target token (NO_VERSION if none)
    advantages: torch.Tensor  # [N] float: per-row (per-trajectory) advantage
    row_traj: list[str]  # trajectory id of each row

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_target_tokens(self) -> int:
        return int(self.loss_mask.sum().item())

    def rows(self, index: torch.Tensor) -> TrainBatch:
        """A sub-batch of the given rows, trimmed to its own longest row."""
        length = int(self.attention_mask[index].sum(dim=1).max().item())
        return TrainBatch(
            input_ids=self.input_ids[index, :length],
            attention_mask=self.attention_mask[index, :length],
            loss_mask=self.loss_mask[index, : length - 1],
            behav_logp=self.behav_logp[index, : length - 1],
            versions=self.versions[index, : length - 1],
            advantages=self.advantages[index],
            row_traj=[self.row_traj[i] for i in index.tolist()],
        )


def trajectory_advantages(groups: list[list[Trajectory]], kind: AdvantageKind, eps: float) -> dict[str, float]:
    """GRPO-family advantages computed within each group (groups may differ in size after failures)."""
    result: dict[str, float] = {}
    for group in groups:
        rewards = torch.tensor([[t.reward for t in group]], dtype=torch.float64)
        adv = group_advantages(rewards, kind=kind, eps=eps)[0]
        for traj, value in zip(group, adv.tolist(), strict=True):
            result[traj.traj_id] = float(value)
    return result


def build_batch(groups: list[list[Trajectory]], advantage_kind: AdvantageKind, eps: float, pad_id: int) -> TrainBatch:
    advantages = trajectory_advantages(groups, advantage_kind, eps)
    rows = [
        (traj.traj_id, seg) for group in groups for traj in group for seg in traj.segments if any(seg.assistant_mask)
    ]
    if not rows:
        raise ValueError("no trainable tokens: every trajectory of the batch is empty")
    length = max(len(seg) for _, seg in rows)
    n = len(rows)
    input_ids = torch.full((n, length), pad_id, dtype=torch.long)
    attention = torch.zeros((n, length), dtype=torch.long)
    loss_mask = torch.zeros((n, length - 1), dtype=torch.float32)
    behav = torch.zeros((n, length - 1), dtype=torch.float32)
    versions = torch.full((n, length - 1), NO_VERSION, dtype=torch.long)
    adv = torch.zeros(n, dtype=torch.float32)
    for i, (traj_id, seg) in enumerate(rows):
        k = len(seg)
        input_ids[i, :k] = torch.tensor(seg.token_ids)
        attention[i, :k] = 1
        loss_mask[i, : k - 1] = torch.tensor(seg.assistant_mask[1:], dtype=torch.float32)
        behav[i, : k - 1] = torch.tensor(seg.logprobs[1:], dtype=torch.float32)
        versions[i, : k - 1] = torch.tensor(seg.versions[1:])
        adv[i] = advantages[traj_id]
    return TrainBatch(input_ids, attention, loss_mask, behav, versions, adv, [t for t, _ in rows])


def mask_stale_tokens(batch: TrainBatch, train_version: int, max_staleness: int | None) -> int:
    """Take every token more than ``max_staleness`` versions older than ``train_version`` out of the loss.

    The scheduler trains a group as long as one of its tokens is fresh (its newest), so a long group whose
    first turns ran under old weights keeps its fresh turns instead of being dropped whole; this keeps the
    bound on every token that does enter the loss (docs/async.md#staleness). Returns how many were masked.
    """
    if max_staleness is None:
        return 0
    stale = (batch.loss_mask != 0) & (batch.versions != NO_VERSION)
    stale &= (train_version - batch.versions) > max_staleness  # policy.freshness.is_fresh, per token
    batch.loss_mask[stale] = 0.0
    return int(stale.sum().item())
