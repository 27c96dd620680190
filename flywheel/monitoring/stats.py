"""The monitor's statistics: a rate's Wilson interval and the one-sided two-proportion z-test.

`trainer.stats` has the same Wilson interval, but it lies outside the trainer's torch-free face
that the app may import (DESIGN.md, boundaries), so the few lines live here too; its tests pin both
to the same numbers. The two-proportion test compares a live version's rate with its predecessor's
over their windows, pooled under the null hypothesis that they are equal; it is one-sided, in the
direction that is worse for the rate. Pure Python: nothing here reads the database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Rate:
    """`events` out of `total`, with the Wilson interval at 95%; value, low and high are None when total is 0."""

    events: int
    total: int
    value: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, events: int, total: int) -> Rate:
        if total == 0:
            return cls(events, total, None, None, None)
        low, high = wilson_interval(events, total)
        return cls(events, total, events / total, low, high)


def wilson_interval(events: int, total: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of `events / total` (never zero wide, always within [0, 1]).

    >>> [round(bound, 3) for bound in wilson_interval(0, 41)]
    [0.0, 0.086]
    """
    if total < 1 or not 0 <= events <= total:
        raise ValueError(f"a rate needs 0 <= events <= total and total >= 1, got {events}/{total}")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    share, spread = events / total, z * z / total
    centre = (share + spread / 2) / (1 + spread)
    half = z * math.sqrt(share * (1 - share) / total + spread / (4 * total)) / (1 + spread)
    low = 0.0 if events == 0 else max(0.0, centre - half)
    high = 1.0 if events == total else min(1.0, centre + half)
    return low, high


def worse_p_value(*, live: Rate, before: Rate, higher_is_worse: bool) -> float:
    """One-sided p-value that `live`'s rate is worse than `before`'s (two-proportion z-test, pooled).

    1.0 when the pooled rate is 0 or 1 (both samples alike: no evidence either way).

    >>> round(worse_p_value(live=Rate.of(45, 100), before=Rate.of(30, 100), higher_is_worse=True), 4)
    0.0142
    """
    if live.total == 0 or before.total == 0:
        raise ValueError("both samples need at least one trajectory")
    pooled = (live.events + before.events) / (live.total + before.total)
    error = math.sqrt(pooled * (1 - pooled) * (1 / live.total + 1 / before.total))
    if error == 0:
        return 1.0
    z = (live.events / live.total - before.events / before.total) / error
    return 1 - NormalDist().cdf(z if higher_is_worse else -z)
