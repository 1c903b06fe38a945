"""Block statistics of a series of iteration times, shared by the measured side and the analysis.

`block_length`: the circular block bootstrap's block (twice the Politis-White
rule with the AR(1) plug-in, docs/design.md "Uncertainty"); the rank's early
stop (`instrument/untilci.py`) sizes its batch means with the same rule, so the
two intervals rest on blocks of the same length. `small_sample_factor`: t/z for
the few blocks an interval rests on. Pure: numpy only.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_LEVEL = 0.95
BLOCK_SCALE = 2.0  # times the Politis-White length


def block_length(x: np.ndarray) -> int:
    """Politis-White block length for the circular block bootstrap, AR(1) plug-in."""
    n = len(x)
    if n < 4 or float(np.std(x)) == 0.0:
        return 1
    d = x - x.mean()
    rho = float(np.dot(d[1:], d[:-1]) / np.dot(d, d))
    rho = min(max(rho, 0.0), 0.95)  # negative correlation: blocks of 1 are conservative enough
    ratio = 2 * rho / (1 - rho * rho)
    b = BLOCK_SCALE * (1.5 * ratio * ratio) ** (1 / 3) * n ** (1 / 3)
    return int(min(max(1, math.ceil(b)), max(1, n // 3)))


def small_sample_factor(blocks: int, level: float = DEFAULT_LEVEL) -> float:
    """t / z for `blocks - 1` degrees of freedom (Cornish-Fisher expansion of Student's t).

    The bootstrap spread rests on about n/b independent blocks, so, like the
    standard error of a mean of few values, it is itself uncertain: widening by
    t/z keeps the coverage near nominal when the blocks are few.
    """
    df = max(blocks - 1, 1)
    z = float(np.sqrt(2) * _erfinv(level))
    t = z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df * df)
    return t / z


def _erfinv(y: float) -> float:
    """Inverse error function by Newton's method on math.erf (enough for a quantile)."""
    x = 0.0
    for _ in range(50):
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x
