"""The glyph task's digit reader: a small CNN that rollarc trains on rendered digits and caches.

It reads the two digit slots of a 16×16 image (two 10-way heads). It trains on renderings of every
digit pair with random shifts, colours, brightness and Gaussian pixel noise, so it reads a slightly
imperfect glyph but not a blob; the reward asks it for the probability of the exact string.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rollarc.diffusion.tasks.font import render_digits

READER_FILE = "digit_reader.pt"


class DigitReader(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, stride=2),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 8 * 8, 64),
            nn.ReLU(),
            nn.Linear(64, 20),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, 2, 10]`` of images ``[batch, 3, 16, 16]``."""
        return self.body(images).view(-1, 2, 10)

    @torch.no_grad()
    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """Per-slot digit probabilities ``[batch, 2, 10]`` of ``[batch, 16, 16, 3]`` images in [0, 1]."""
        x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))).float()
        return torch.softmax(self(x), dim=-1).numpy()


def _batch(rng: random.Random, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for _ in range(size):
        digits = (rng.randrange(10), rng.randrange(10))
        colour = (rng.uniform(0.6, 1), rng.uniform(0.6, 1), rng.uniform(0.6, 1))
        image = render_digits(digits, rng, colour) + np.float32(rng.uniform(0, 0.15)) * np.random.default_rng(
            rng.randrange(1 << 30)
        ).standard_normal((16, 16, 3)).astype(np.float32)
        images.append(np.clip(image, 0, 1).transpose(2, 0, 1))
        labels.append(digits)
    return torch.from_numpy(np.stack(images)), torch.tensor(labels)


def train_reader(steps: int = 400, seed: int = 0) -> DigitReader:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    reader = DigitReader()
    opt = torch.optim.Adam(reader.parameters(), lr=2e-3)
    for _ in range(steps):
        x, y = _batch(rng, 64)
        loss = nn.functional.cross_entropy(reader(x).reshape(-1, 10), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return reader.eval()


def load_or_train_reader(cache_dir: Path, steps: int = 400) -> DigitReader:
    """The cached reader under ``cache_dir``, trained (and saved atomically) when missing."""
    path = cache_dir / READER_FILE
    reader = DigitReader()
    if path.is_file():
        reader.load_state_dict(torch.load(path, weights_only=True))
        return reader.eval()
    reader = train_reader(steps)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(reader.state_dict(), tmp)
    tmp.replace(path)
    return reader
