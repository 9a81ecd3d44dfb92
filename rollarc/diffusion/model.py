"""The text-to-image policy: a ``diffusers`` DiT (``PixArtTransformer2DModel``) and a prompt encoder.

**Set-up.** Pixel space, 16×16 RGB, patch size 2 (64 image tokens). Pixel space because a 2-core demo
has no room for a VAE, and 16×16 because it is small for two cores yet holds a 4×4 square, a 5×5 plus or
two 6×10 digits that a pixel reward tells apart; 64 tokens keep a batch of 64 images one cheap forward
pass. The tasks' images live in ``[0, 1]``; the model works in ``[-1, 1]``.

**Conditioning.** ``PromptEncoder`` embeds the prompt's words (a fixed vocabulary from the tasks) with
learned position embeddings and one transformer encoder layer, and the DiT cross-attends to it
(PixArt's ``caption_projection``). Both are diffusers ``ModelMixin`` models, saved and loaded with
``save_pretrained``/``from_pretrained``: a policy directory holds ``transformer/`` and
``prompt_encoder/``; any PixArt-architecture ``transformer/`` with matching channels plugs in.

**Time.** Rectified flow with ``t ∈ [0, 1]`` (1 is noise); PixArt's timestep embedding takes
``1000 · t``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from diffusers import ModelMixin, PixArtTransformer2DModel
from diffusers.configuration_utils import ConfigMixin, register_to_config
from torch import nn

TRANSFORMER_DIR = "transformer"
ENCODER_DIR = "prompt_encoder"


class PromptEncoder(ModelMixin, ConfigMixin):
    """Word embeddings + positions + one transformer layer: ``[batch, max_words, dim]`` and a word mask."""

    @register_to_config
    def __init__(self, vocab: list[str], dim: int = 64, max_words: int = 16, heads: int = 4):
        super().__init__()
        self.index = {word: i + 1 for i, word in enumerate(vocab)}  # 0 pads
        self.embed = nn.Embedding(len(vocab) + 1, dim)
        self.position = nn.Parameter(torch.zeros(max_words, dim))
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True)

    def tokenize(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        max_words = int(self.config["max_words"])
        ids = torch.zeros(len(prompts), max_words, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            words = prompt.split()
            if len(words) > max_words:
                raise ValueError(f"prompt {prompt!r} has {len(words)} words; the encoder takes {max_words}")
            unknown = [w for w in words if w not in self.index]
            if unknown:
                raise ValueError(f"prompt {prompt!r}: words {unknown} are not in the encoder's vocabulary")
            ids[row, : len(words)] = torch.tensor([self.index[w] for w in words])
        return ids, ids > 0

    def forward(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = self.tokenize(prompts)
        hidden = self.embed(ids.to(self.position.device)) + self.position
        mask = mask.to(hidden.device)
        return self.layer(hidden, src_key_padding_mask=~mask), mask


class T2IPolicy(nn.Module):
    """The DiT and its prompt encoder; ``velocity`` is the flow-matching prediction."""

    # Any: diffusers' lazy module exports type as plain names to mypy (no nn.Module methods on them).
    def __init__(self, transformer: Any, encoder: Any):
        super().__init__()
        self.transformer = transformer
        self.encoder = encoder

    @property
    def image_size(self) -> int:
        return int(self.transformer.config.sample_size)

    @property
    def device(self) -> torch.device:
        """Where the DiT's weights are (``model.device``, resolved in the actor that holds the policy)."""
        return torch.device(next(self.transformer.parameters()).device)

    def encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder(prompts)

    def velocity(self, x: torch.Tensor, t: torch.Tensor, context: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        hidden, mask = context
        out = self.transformer(
            x,
            encoder_hidden_states=hidden,
            timestep=t * 1000.0,
            added_cond_kwargs={"resolution": None, "aspect_ratio": None},
            encoder_attention_mask=mask.to(x.dtype),
            return_dict=False,
        )[0]
        return out

    def save(self, path: Path) -> None:
        """A diffusers-format policy directory, written next to ``path`` and renamed into place."""
        tmp = path.with_name(path.name + ".tmp")
        self.transformer.save_pretrained(tmp / TRANSFORMER_DIR)
        self.encoder.save_pretrained(tmp / ENCODER_DIR)
        if path.exists():
            old = path.with_name(path.name + ".old")
            path.replace(old)
            tmp.replace(path)
            _remove_tree(old)
        else:
            tmp.replace(path)


def build_policy(vocab: list[str], image_size: int, width: int, layers: int, heads: int, seed: int) -> T2IPolicy:
    """A fresh tiny policy; ``width`` is the DiT's hidden size (``heads × head_dim``) and the text width."""
    torch.manual_seed(seed)
    transformer = PixArtTransformer2DModel(
        num_attention_heads=heads,
        attention_head_dim=width // heads,
        in_channels=3,
        out_channels=3,
        num_layers=layers,
        cross_attention_dim=width,
        sample_size=image_size,
        patch_size=2,
        caption_channels=width,
        norm_num_groups=1,
    )
    return T2IPolicy(transformer, PromptEncoder(vocab=vocab, dim=width, heads=heads))


def load_policy(path: str | Path) -> T2IPolicy:
    path = Path(path)
    if not (path / TRANSFORMER_DIR / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a t2i policy directory (no {TRANSFORMER_DIR}/config.json)")
    transformer = PixArtTransformer2DModel.from_pretrained(path / TRANSFORMER_DIR, low_cpu_mem_usage=False)
    encoder = PromptEncoder.from_pretrained(path / ENCODER_DIR, low_cpu_mem_usage=False)
    return T2IPolicy(transformer, encoder)


def _remove_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    path.rmdir()
