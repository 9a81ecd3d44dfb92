"""The glyph task's bitmap font: two digits in fixed slots of a 16×16 image (shared by the task and its reader)."""

from __future__ import annotations

import random

import numpy as np

SIZE = 16
FONT = {
    "0": ["111", "101", "101", "101", "111"],
    "1": ["010", "110", "010", "010", "111"],
    "2": ["111", "001", "111", "100", "111"],
    "3": ["111", "001", "111", "001", "111"],
    "4": ["101", "101", "111", "001", "001"],
    "5": ["111", "100", "111", "001", "111"],
    "6": ["111", "100", "111", "101", "111"],
    "7": ["111", "001", "010", "010", "010"],
    "8": ["111", "101", "111", "101", "111"],
    "9": ["111", "101", "111", "001", "111"],
}
SLOTS = (1, 9)  # left column of each digit
TOP = 3


def render_digits(
    digits: tuple[int, int], rng: random.Random, colour: tuple[float, float, float] = (1.0, 1.0, 1.0)
) -> np.ndarray:
    """Two digits in their slots, each shifted by up to one pixel."""
    image = np.zeros((SIZE, SIZE, 3), dtype=np.float32)
    for digit, left in zip(digits, SLOTS, strict=True):
        glyph = np.array([[c == "1" for c in row] for row in FONT[str(digit)]], dtype=bool)
        big = glyph.repeat(2, axis=0).repeat(2, axis=1)
        top, left = TOP + rng.randint(-1, 1), left + rng.randint(-1, 1)
        image[top : top + 10, max(left, 0) : left + 6][big[:, : 6 - max(0, -left)]] = colour
    return image


def glyph_boxes() -> np.ndarray:
    expected = np.zeros((SIZE, SIZE), dtype=bool)
    for left in SLOTS:
        expected[TOP - 2 : TOP + 12, max(left - 2, 0) : left + 8] = True
    return expected
