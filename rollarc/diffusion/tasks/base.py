"""The task contract, and the pixel measures every reward shares (background level, haze, components).

Images are ``float32 [H, W, 3]`` arrays in ``[0, 1]``; black is the background. A task:

- lists its prompts (a fixed, enumerable set) and splits them into train and held-out by a hash of the
  text, so the split is stable across runs and processes;
- renders a prompt's ground truth (used to pretrain the DiT, and by the tests);
- scores an image for a prompt with a reward in ``[0, 1]`` computed from the pixels alone;
- maps a prompt to its template (its structure with free attributes blanked), which recurs across
  steps where a prompt rarely does: the bandit planner's arms.

**The reward-hacking guard.** A prototype's policy learned faint background haze against a naive
detector. Every reward here is multiplied by :func:`cleanliness`, which is 1 for a black background
and falls to 0 as stray light (pixels that belong to no expected object) grows.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np

TASK_SIZE = 16  # every task renders and scores 16×16 images; a larger model works at a multiple of it
BACKGROUND_MAX = 0.2  # a pixel whose brightest channel is below this is background
HELDOUT_MOD = 5  # one prompt in five (by crc32 of its text) is held out


@dataclass(frozen=True)
class Component:
    """A 4-connected blob of pixels: its area and bounding box (top, left, bottom, right; inclusive)."""

    area: int
    box: tuple[int, int, int, int]

    @property
    def fill(self) -> float:
        top, left, bottom, right = self.box
        return self.area / ((bottom - top + 1) * (right - left + 1))

    @property
    def size(self) -> tuple[int, int]:
        top, left, bottom, right = self.box
        return bottom - top + 1, right - left + 1


class Task(Protocol):
    """What the trainer needs from a task plugin."""

    name: str

    def prompts(self) -> list[str]: ...

    def render(self, prompt: str, rng: random.Random) -> np.ndarray: ...

    def reward(self, prompt: str, image: np.ndarray) -> float: ...

    def template(self, prompt: str) -> str: ...


def upscale(image: np.ndarray, size: int) -> np.ndarray:
    """A task's ``[16, 16, 3]`` rendering at ``size`` pixels a side (nearest neighbour: each pixel a block)."""
    factor = _factor(size)
    return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)


def to_task_size(images: np.ndarray) -> np.ndarray:
    """Images ``[B, size, size, 3]`` at the tasks' 16×16, each pixel the mean of its block (what rewards read).

    A model at 32×32 (``model.image_size``) is pretrained on :func:`upscale`'d ground truth, so each of its
    2×2 blocks is one task pixel; scoring the block means keeps every reward's thresholds as they are.
    """
    batch, size = images.shape[0], images.shape[1]
    factor = _factor(size)
    return images.reshape(batch, TASK_SIZE, factor, TASK_SIZE, factor, images.shape[3]).mean(axis=(2, 4))


def _factor(size: int) -> int:
    if size % TASK_SIZE:
        raise ValueError(f"image size {size} is not a multiple of the tasks' {TASK_SIZE}")
    return size // TASK_SIZE


def is_heldout(prompt: str) -> bool:
    return zlib.crc32(prompt.encode()) % HELDOUT_MOD == 0


def split(prompts: list[str]) -> tuple[list[str], list[str]]:
    """(train, held-out) prompts, each in the given order."""
    return [p for p in prompts if not is_heldout(p)], [p for p in prompts if is_heldout(p)]


def components(mask: np.ndarray) -> list[Component]:
    """4-connected components of a boolean ``[H, W]`` mask, in scan order."""
    seen = np.zeros_like(mask, dtype=bool)
    height, width = mask.shape
    found = []
    for y0 in range(height):
        for x0 in range(width):
            if not mask[y0, x0] or seen[y0, x0]:
                continue
            queue, area = deque([(y0, x0)]), 0
            seen[y0, x0] = True
            top, left, bottom, right = y0, x0, y0, x0
            while queue:
                y, x = queue.popleft()
                area += 1
                top, left, bottom, right = min(top, y), min(left, x), max(bottom, y), max(right, x)
                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                    if 0 <= ny < height and 0 <= nx < width and mask[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        queue.append((ny, nx))
            found.append(Component(area, (top, left, bottom, right)))
    return found


def cleanliness(image: np.ndarray, expected: np.ndarray) -> float:
    """1 for a clean background, falling to 0 with stray light outside the ``expected`` pixels.

    Two terms, multiplied: the fraction of unexpected pixels bright enough to count as drawn (0 at none,
    0 at 10% of the image), and the mean level of the unexpected pixels, which catches haze too faint to
    count as drawn (1 at 0, 0 at a mean of 0.15 of full scale).
    """
    brightness = image.max(axis=2)
    stray = ~expected
    if not stray.any():
        return 1.0
    drawn = float(((brightness >= BACKGROUND_MAX) & stray).sum()) / brightness.size
    level = float(brightness[stray].mean())
    return max(0.0, 1.0 - drawn / 0.10) * max(0.0, 1.0 - level / 0.15)


def checked_image(image: np.ndarray) -> np.ndarray:
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be [H, W, 3], got shape {image.shape}")
    return np.clip(np.nan_to_num(image.astype(np.float32), nan=1.0), 0.0, 1.0)
