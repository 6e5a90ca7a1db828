"""Estimators for eval results: pass@k, pass^k, Wilson intervals, a bootstrap over tasks.

`pass_at_k(n, c, k)`: the chance that at least one of k trials drawn without replacement from n
(c of them passing) passes; `pass_hat_k(n, c, k)`: that all k pass. Both refuse inputs outside
0 < k <= n, 0 <= c <= n with `ValueError`. Rates are aggregated per task before averaging over
tasks (`task_mean_interval`), so a task with more trials does not weigh more. Intervals are 95%.
Pure functions; the bootstrap takes its seed so a report is reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

Z95 = 1.959963984540054


def _check(n: int, c: int, k: int) -> None:
    if not 0 < k <= n:
        raise ValueError(f"k must satisfy 0 < k <= n (got k={k}, n={n})")
    if not 0 <= c <= n:
        raise ValueError(f"c must satisfy 0 <= c <= n (got c={c}, n={n})")


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): at least one of k trials passes."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k): all k trials pass (0 when c < k)."""
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def wilson(passes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate; (0, 1) for no trials at all."""
    if not 0 <= passes <= trials:
        raise ValueError(f"passes must satisfy 0 <= passes <= trials (got {passes}, {trials})")
    if trials == 0:
        return 0.0, 1.0
    p = passes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def task_mean_interval(
    rates: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of per-task rates and a percentile bootstrap interval over
    tasks. One task gives a zero-width interval: there is nothing to resample, say so in the
    report rather than trust it."""
    if not rates:
        raise ValueError("no tasks to average")
    mean = sum(rates) / len(rates)
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(rates) for _ in rates) / len(rates) for _ in range(resamples))
    low = means[int(0.025 * (resamples - 1))]
    high = means[math.ceil(0.975 * (resamples - 1))]
    return mean, low, high
