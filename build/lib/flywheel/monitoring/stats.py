"""The monitor's statistics: a rate with its Wilson interval, and the one-sided two-proportion z-test.

The Wilson interval is the trainer's (`trainer.spec.stats`, in the torch-free face), so a rate on
the monitor and one in an evaluation report are bounded alike. The two-proportion test compares a
live version's rate with its predecessor's over their windows, pooled under the null hypothesis that
they are equal; it is one-sided, in the direction that is worse for the rate. Pure Python: nothing
here reads the database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from trainer.spec.stats import wilson_interval


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
        interval = wilson_interval(events, total)
        return cls(events, total, interval.value, interval.low, interval.high)


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
