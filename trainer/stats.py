"""Bootstrap confidence intervals and percentiles over per-task measurements.

`bootstrap_interval` is the general form: it resamples the rows of one or more equally
long columns together (so paired measurements, such as a base and a candidate model on the
same tasks, stay paired) and takes a percentile interval of any statistic.
`mean_interval` gives a rate's interval; `paired_difference_interval` the interval of the
mean difference between two models on the same tasks, as a promotion gate needs.
Everything is seeded and pure Python. Deciding what an interval means for a promotion
is not done here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95

Statistic = Callable[..., float]


@dataclass(frozen=True)
class Interval:
    """A statistic's value on the sample and its bootstrap interval at `confidence`."""

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
