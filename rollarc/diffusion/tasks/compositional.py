"""GenEval-like compositional prompts: 1–3 coloured shapes, with a count and a side, scored from the pixels.

A prompt has one or two clauses, e.g. ``two red squares left and one blue plus right`` (at most three
shapes in all; two clauses take different sides and colours). The image is 16×16: each side is an
8-pixel-wide half; a shape is a filled 4×4 square or a 5×5 plus with 1-pixel arms, one or two stacked
per half.

**Reward** (in ``[0, 1]``), the mean over clauses of::

    0.4 × presence + 0.3 × count_score + 0.3 × shape_score

where, in the clause's half, the pixels within 0.3 (every channel) of the clause's colour are the
clause's pixels: ``presence`` is ``min(n, m) / max(n, m)`` for ``n`` of them where the shapes have ``m`` (too many
cost as much as too few, so painting the whole half does not pay);
they form 4-connected blobs, of which those of at least 3 pixels count; ``count_score =
1 / (1 + |blobs − count|)`` (0 with no blob) and ``shape_score`` is the mean over blobs of how close the
blob's fill of its bounding box is to the shape's (1.0 for a square, 9/25 for a plus), 0 when its box
is not 3–6 pixels a side. Presence gives a weak base a dense signal; count and shape need
real blobs. The mean is then
multiplied by :func:`~rollarc.diffusion.tasks.base.cleanliness` with the clauses' pixels as the
expected ones: anything else lit (the other half of a one-clause prompt, a wrong colour, haze) costs reward.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import numpy as np

from rollarc.diffusion.tasks.base import checked_image, cleanliness, components

SIZE = 16
COLOURS = {"red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0), "yellow": (1.0, 1.0, 0.0)}
SHAPES = {"square": 1.0, "plus": 9 / 25}  # fill of the bounding box
PLURAL = {"square": "squares", "plus": "pluses"}
COUNTS = {"one": 1, "two": 2}
SIDES = ("left", "right")
COLOUR_TOL = 0.3
MIN_AREA = 3
AREA = {"square": 16, "plus": 9}  # pixels of one shape


@dataclass(frozen=True)
class Clause:
    count: int
    colour: str
    shape: str
    side: str

    def text(self) -> str:
        word = next(w for w, n in COUNTS.items() if n == self.count)
        return f"{word} {self.colour} {self.shape if self.count == 1 else PLURAL[self.shape]} {self.side}"


def parse(prompt: str) -> list[Clause]:
    clauses = []
    for part in prompt.split(" and "):
        word, colour, shape, side = part.split()
        shape = next(s for s, p in PLURAL.items() if shape in (s, p))
        clauses.append(Clause(COUNTS[word], colour, shape, side))
    return clauses


def _half(side: str) -> slice:
    return slice(0, SIZE // 2) if side == "left" else slice(SIZE // 2, SIZE)


def _stamp(image: np.ndarray, shape: str, colour: str, top: int, left: int) -> None:
    rgb = np.array(COLOURS[colour], dtype=np.float32)
    if shape == "square":
        image[top : top + 4, left : left + 4] = rgb
    else:
        image[top + 2, left : left + 5] = rgb
        image[top : top + 5, left + 2] = rgb


class CompositionalTask:
    name = "compositional"

    def prompts(self) -> list[str]:
        singles = [Clause(n, c, s, side) for n, c, s, side in itertools.product((1, 2), COLOURS, SHAPES, SIDES)]
        out = [c.text() for c in singles]
        for left, right in itertools.product(singles, singles):
            two_sides = left.side == "left" and right.side == "right" and left.colour != right.colour
            if two_sides and left.count + right.count <= 3:
                out.append(f"{left.text()} and {right.text()}")
        return out

    @staticmethod
    def template(prompt: str) -> str:
        """The prompt's structure (counts, shapes, sides) with its colours blanked: the bandit's arm.

        20 templates over 176 prompts, so a template recurs every few steps of a run.
        """
        return " ".join("*" if word in COLOURS else word for word in prompt.split())

    def render(self, prompt: str, rng: random.Random) -> np.ndarray:
        """The ground truth, with each shape jittered by up to 1 pixel (so pretraining sees a distribution)."""
        image = np.zeros((SIZE, SIZE, 3), dtype=np.float32)
        for clause in parse(prompt):
            x0 = _half(clause.side).start
            tops = [5] if clause.count == 1 else [1, 9]
            for top in tops:
                jitter_y, jitter_x = rng.randint(-1, 1), rng.randint(0, 2)
                _stamp(image, clause.shape, clause.colour, top + jitter_y, x0 + 1 + jitter_x)
        return image

    def reward(self, prompt: str, image: np.ndarray) -> float:
        image = checked_image(image)
        expected = np.zeros(image.shape[:2], dtype=bool)
        scores = []
        for clause in parse(prompt):
            cols = _half(clause.side)
            region = image[:, cols]
            mask = (np.abs(region - np.array(COLOURS[clause.colour], dtype=np.float32)) < COLOUR_TOL).all(axis=2)
            blobs = [b for b in components(mask) if b.area >= MIN_AREA]
            lit, want = float(mask.sum()), float(clause.count * AREA[clause.shape])
            presence = min(lit, want) / max(lit, want)
            expected[:, cols] |= mask
            if not blobs:
                scores.append(0.4 * presence)
                continue
            count_score = 1.0 / (1.0 + abs(len(blobs) - clause.count))
            shape_score = float(np.mean([_shape_score(b.fill, b.size, SHAPES[clause.shape]) for b in blobs]))
            scores.append(0.4 * presence + 0.3 * count_score + 0.3 * shape_score)
        return float(np.mean(scores)) * cleanliness(image, expected)


def _shape_score(fill: float, size: tuple[int, int], target_fill: float) -> float:
    closeness = max(0.0, 1.0 - abs(fill - target_fill) / 0.4)
    sized = all(3 <= side <= 6 for side in size)
    return closeness if sized else 0.0
