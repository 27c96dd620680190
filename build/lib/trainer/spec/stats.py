"""Confidence intervals and percentiles over per-task measurements.

A rate (a share of tasks that passed) gets the Wilson score interval (`wilson_interval`,
`rate_interval`): a percentile bootstrap of a rate at 0% or 100% is zero wide ("0% [0, 0]" over
41 tasks), while Wilson gives [0, 8.6%] there and keeps close to its nominal coverage for the
small samples an evaluation has. `bootstrap_interval` is the general form for everything else:
it resamples the rows of one or more equally long columns together (so paired measurements,
such as a base and a candidate model on the same tasks, stay paired) and takes a percentile
interval of any statistic. `mean_interval` gives a mean's interval (a reward, not a rate);
`paired_difference_interval` the interval of the mean difference between two models on the
same tasks, as a promotion gate needs. Everything is seeded and pure Python (it sits in the
torch-free face so that the app's monitor bounds its rates with the same interval). Deciding what
an interval means for a promotion is not done here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95

Statistic = Callable[..., float]


@dataclass(frozen=True)
class Interval:
    """A statistic's value on the sample and its interval (Wilson or bootstrap) at `confidence`."""

    value: float
    low: float
    high: float
    n: int
    confidence: float = DEFAULT_CONFIDENCE

    def to_json(self) -> dict[str, Any]:
        return {"value": round(self.value, 6), "low": round(self.low, 6), "high": round(self.high, 6), "n": self.n}


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of an empty sample")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def bootstrap_interval(
    statistic: Statistic,
    columns: Sequence[Sequence[float]],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """`statistic(*columns)` and its percentile bootstrap interval, resampling rows jointly."""
    size = _common_length(columns)
    rng = random.Random(seed)
    rows = range(size)
    estimates = []
    for _ in range(resamples):
        picked = rng.choices(rows, k=size)
        estimates.append(statistic(*([column[i] for i in picked] for column in columns)))
    tail = (1 - confidence) / 2 * 100
    return Interval(
        value=statistic(*columns),
        low=percentile(estimates, tail),
        high=percentile(estimates, 100 - tail),
        n=size,
        confidence=confidence,
    )


def _common_length(columns: Sequence[Sequence[float]]) -> int:
    if not columns:
        raise ValueError("bootstrap needs at least one column")
    sizes = {len(column) for column in columns}
    if len(sizes) != 1:
        raise ValueError(f"columns differ in length: {sorted(sizes)}")
    size = sizes.pop()
    if size == 0:
        raise ValueError("bootstrap of an empty sample")
    return size


def mean_interval(values: Sequence[float], **options: Any) -> Interval | None:
    """The mean (a rate, for 0/1 values) and its interval; None for an empty sample."""
    if not values:
        return None
    return bootstrap_interval(mean, [values], **options)


def paired_difference_interval(after: Sequence[float], before: Sequence[float], **options: Any) -> Interval:
    """The mean of `after - before` over paired measurements, with its interval."""
    return bootstrap_interval(lambda a, b: mean(a) - mean(b), [after, before], **options)


def wilson_interval(successes: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The share `successes / n` with its Wilson score interval (never zero wide, always within [0, 1]).

    >>> interval = wilson_interval(0, 41)
    >>> (interval.low, round(interval.high, 3))
    (0.0, 0.086)
    """
    if n < 1:
        raise ValueError("a rate's interval needs at least one task")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n ({n}), got {successes}")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    share = successes / n
    spread = z * z / n
    centre = (share + spread / 2) / (1 + spread)
    half = z * math.sqrt(share * (1 - share) / n + spread / (4 * n)) / (1 + spread)
    # At 0 or n successes the bound sits exactly on 0 or 1; rounding must not push it past.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(value=share, low=low, high=high, n=n, confidence=confidence)


def rate_interval(values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> Interval | None:
    """The rate of 0/1 values (pass or fail per task) with its Wilson interval; None for an empty sample."""
    if not values:
        return None
    if any(value not in (0.0, 1.0) for value in values):
        raise ValueError("a rate's values must each be 0 or 1")
    return wilson_interval(int(sum(values)), len(values), confidence)
