"""Real JPEG ImageFolder datasets: generate one (`make-dataset`); scanning one is `dataset.py`.

The generator writes `DIR/class_XXX/img_XXXXXX.jpg` with varied content
(gradients, shapes, noise) and varied sizes, deterministic by seed, in
parallel on all cores. Noise makes the files compress like photographs
rather than flat colours, so decoding costs what real JPEGs cost.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from dsanalyze.errors import DatasetError


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise DatasetError(f"cannot read --size {text!r}: write WIDTHxHEIGHT, such as 500x375") from None
    if w < 8 or h < 8:
        raise DatasetError(f"--size {text!r} is too small: at least 8x8")
    return w, h


def _render(args: tuple[str, int, int, int, float, int]) -> int:
    """Draw and save one image; return its size in bytes. Runs in a worker process."""
    import numpy as np
    from PIL import Image

    path, width, height, seed, jitter, quality = args
    rng = np.random.default_rng(seed)
    scale = 1.0 + rng.uniform(-jitter, jitter) if jitter > 0 else 1.0
    w, h = max(8, int(width * scale)), max(8, int(height * scale))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.empty((h, w, 3), np.float32)
    for c in range(3):
        fx, fy, phase = rng.uniform(0.002, 0.05, 2).tolist() + [rng.uniform(0, 6.3)]
        img[..., c] = 127 + 90 * np.sin(fx * xx + fy * yy + phase)
    for _ in range(int(rng.integers(2, 6))):  # a few filled ellipses
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(0.05, 0.3) * w, rng.uniform(0.05, 0.3) * h
        mask = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1
        img[mask] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 18, img.shape)  # texture, so the JPEG is photo-sized
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=quality)
    return os.path.getsize(path)


def make_dataset(root: str | Path, images: int, classes: int, size: tuple[int, int],
                 size_jitter: float = 0.0, seed: int = 0, quality: int = 90,
                 workers: int | None = None) -> tuple[int, int]:
    """Write an ImageFolder of `images` JPEGs over `classes` folders.

    Returns (files written, total bytes). Deterministic for a given seed.
    """
    if images < 1 or classes < 1:
        raise DatasetError("--images and --classes must be at least 1")
    if not 0 <= size_jitter < 1:
        raise DatasetError("--size-jitter must be in [0, 1)")
    root = Path(root)
    tasks = []
    for c in range(classes):
        (root / f"class_{c:03d}").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        path = root / f"class_{i % classes:03d}" / f"img_{i:06d}.jpg"
        tasks.append((str(path), size[0], size[1], seed * 1_000_003 + i, size_jitter, quality))
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        sizes = list(pool.map(_render, tasks, chunksize=max(1, len(tasks) // 64)))
    return len(sizes), sum(sizes)
