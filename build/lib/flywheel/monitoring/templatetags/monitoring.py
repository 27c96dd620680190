"""Template filters of the monitoring pages: a rate with its interval and counts, a number that may be missing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import template

from flywheel.monitoring.stats import Rate

register = template.Library()


@register.filter
def rate_of(rates: Mapping[str, Rate], name: str) -> Rate | None:
    """`rates[name]`: templates cannot index by a variable."""
    return rates.get(name)


@register.filter
def rate_text(rate: Rate | None) -> str:
    """The rate, its interval and counts (12% [5–25%] · 3/25), or "—" when nothing counted."""
    if rate is None or rate.value is None or rate.low is None or rate.high is None:
        return "—"
    return f"{rate.value:.0%} [{100 * rate.low:.0f}–{rate.high:.0%}] · {rate.events}/{rate.total}"


@register.filter
def number(value: Any, digits: int = 0) -> str:
    """A number rounded to `digits`, or "—" when missing."""
    return "—" if value is None else f"{float(value):,.{int(digits)}f}"
