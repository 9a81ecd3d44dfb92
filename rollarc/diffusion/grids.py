"""Sample grids: a row of images, scaled up with nearest-neighbour so 16×16 pixels stay visible."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

SCALE = 8


def save_grid(path: Path, images: np.ndarray, columns: int = 8) -> Path:
    """Write ``[N, H, W, 3]`` images in [0, 1] as one PNG, ``columns`` per row, 1-pixel grey gutters."""
    n, h, w, _ = images.shape
    rows = -(-n // columns)
    canvas = np.full((rows * (h + 1) + 1, columns * (w + 1) + 1, 3), 0.35, dtype=np.float32)
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        canvas[1 + r * (h + 1) : 1 + r * (h + 1) + h, 1 + c * (w + 1) : 1 + c * (w + 1) + w] = image
    picture = Image.fromarray((np.clip(canvas, 0, 1) * 255).astype(np.uint8))
    path.parent.mkdir(parents=True, exist_ok=True)
    picture.resize((canvas.shape[1] * SCALE, canvas.shape[0] * SCALE), Image.Resampling.NEAREST).save(path)
    return path
