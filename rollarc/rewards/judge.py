"""The progress judge: a small transformer encoder that scores a finished trajectory in [0, 1].

It reads the trajectory's last token ids (see :mod:`rollarc.rewards.inputs`), right-aligned behind a
classification token, and predicts two things from that token's output:

* ``progress``: how much of the optimal path to the goal the episode covered (1 on success), the
  score used as the shaped reward (partial credit for failed episodes);
* ``success``: whether the episode succeeded (a check that it reads the outcome correctly).

A directory holds ``model.safetensors`` and ``judge.json`` (architecture, tokenizer fingerprint,
held-out metrics). Loading imports only torch and safetensors, so a cold Serve replica starts fast.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

WEIGHTS, META = "model.safetensors", "judge.json"


@dataclass(frozen=True)
class JudgeSpec:
    """Everything needed to rebuild the network (saved in ``judge.json``)."""

    vocab_size: int  # the policy tokenizer's ids; id ``vocab_size`` is the classification token
    pad_id: int
    context_tokens: int
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    tokenizer_sha256: str = ""

    @property
    def length(self) -> int:
        return self.context_tokens + 1

    @property
    def cls_id(self) -> int:
        return self.vocab_size


class ProgressJudge(nn.Module):
    def __init__(self, spec: JudgeSpec):
        super().__init__()
        self.spec = spec
        d = spec.d_model
        self.embed = nn.Embedding(spec.vocab_size + 1, d)
        self.position = nn.Embedding(spec.length, d)
        layer = nn.TransformerEncoderLayer(
            d, spec.heads, dim_feedforward=4 * d, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, spec.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 2)  # [success logit, progress logit]

    def encode_batch(self, sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-pad to the fixed length (so positions count from the end): ids and the padding mask."""
        spec = self.spec
        ids = torch.full((len(sequences), spec.length), spec.pad_id, dtype=torch.long)
        pad = torch.ones((len(sequences), spec.length), dtype=torch.bool)
        for row, seq in enumerate(sequences):
            tail = [spec.cls_id, *seq[-spec.context_tokens :]]
            bad = [t for t in tail[1:] if not 0 <= t < spec.vocab_size]
            if bad:
                raise ValueError(
                    f"token id {bad[0]} is outside the judge's vocabulary of {spec.vocab_size}; "
                    "was the judge trained with this policy's tokenizer?"
                )
            ids[row, spec.length - len(tail) :] = torch.tensor(tail, dtype=torch.long)
            pad[row, spec.length - len(tail) :] = False
        return ids, pad

    def forward(self, ids: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, 2]``: success, progress."""
        positions = torch.arange(self.spec.length, device=ids.device)
        x = self.embed(ids) + self.position(positions)[None]
        x = self.encoder(x, src_key_padding_mask=pad)
        cls_index = (~pad).float().argmax(dim=1)  # the first unpadded position holds the classification token
        pooled = self.norm(x[torch.arange(len(ids)), cls_index])
        return self.head(pooled)

    @torch.inference_mode()
    def score(self, sequences: list[list[int]]) -> list[float]:
        """Predicted progress in [0, 1] for each token sequence."""
        if not sequences:
            return []
        ids, pad = self.encode_batch(sequences)
        return torch.sigmoid(self(ids, pad)[:, 1]).tolist()


def tokenizer_fingerprint(vocab: dict[str, int]) -> str:
    """A digest of a tokenizer's vocabulary: a judge only understands the ids it was trained on."""
    return hashlib.sha256(json.dumps(sorted(vocab.items(), key=lambda kv: kv[1])).encode()).hexdigest()


def save_judge(model: ProgressJudge, path: str | Path, meta: dict[str, Any]) -> Path:
    """Write the weights and ``judge.json`` (spec + ``meta``) atomically: readers see all or nothing."""
    from rollarc.models.checkpoint import atomic_directory  # deferred: transformers is heavy; kept off the replica path

    with atomic_directory(path) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / WEIGHTS))
        (tmp / META).write_text(json.dumps({"spec": asdict(model.spec), **meta}, indent=1))
    return Path(path)


def read_meta(path: str | Path) -> dict[str, Any]:
    """``judge.json`` of a judge directory, with a clear error when it is not one."""
    meta_path = Path(path) / META
    if not meta_path.is_file() or not (Path(path) / WEIGHTS).is_file():
        raise FileNotFoundError(
            f"{path} is not a reward judge directory (needs {META} and {WEIGHTS}); "
            "train one with `rollarc reward train CONFIG`"
        )
    return json.loads(meta_path.read_text())


def load_judge(path: str | Path) -> ProgressJudge:
    meta = read_meta(path)
    model = ProgressJudge(JudgeSpec(**meta["spec"]))
    model.load_state_dict(load_file(str(Path(path) / WEIGHTS)))
    return model.eval()
