"""OCR-like glyph prompts: ``write 4 7`` asks for the two digits, scored by a digit reader rollarc trains.

The image is 16×16: each digit is a 3×5 bitmap font scaled ×2 (6×10 pixels), white, the first at
columns 1–6 and the second at 9–14, rows 3–12 (jittered by up to a pixel in rendering).

**Reward**: the reader's probability that the image reads exactly the prompt's two digits
(``p(first) × p(second)``), times :func:`~rollarc.diffusion.tasks.base.cleanliness` with the two glyph
boxes (one pixel of margin) as the expected pixels, so light outside them costs reward.
"""

from __future__ import annotations

import random

import numpy as np

from rollarc.diffusion.tasks.base import checked_image, cleanliness
from rollarc.diffusion.tasks.digit_reader import DigitReader
from rollarc.diffusion.tasks.font import glyph_boxes, render_digits


def digits_of(prompt: str) -> tuple[int, int]:
    _, first, second = prompt.split()
    return int(first), int(second)


class GlyphTask:
    name = "glyph"

    def __init__(self, reader: DigitReader):
        self.reader = reader

    def prompts(self) -> list[str]:
        return [f"write {a} {b}" for a in range(10) for b in range(10)]

    @staticmethod
    def template(prompt: str) -> str:
        """The prompt with its second digit blanked (``write 4 *``): the bandit's arm, 10 in all."""
        first, _ = digits_of(prompt)
        return f"write {first} *"

    def render(self, prompt: str, rng: random.Random) -> np.ndarray:
        return render_digits(digits_of(prompt), rng)

    def reward(self, prompt: str, image: np.ndarray) -> float:
        image = checked_image(image)
        first, second = digits_of(prompt)
        probs = self.reader.probabilities(image[None])[0]  # [2, 10]
        return float(probs[0, first] * probs[1, second]) * cleanliness(image, glyph_boxes())
