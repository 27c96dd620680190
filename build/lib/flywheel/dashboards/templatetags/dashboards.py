"""Filters of the home page: rates in 0..1 shown as percentages, gains as percentage points."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def percent(value: float | None) -> str:
    """0.625 → "62.5%"; None → "—"."""
    if value is None:
        return "—"
    return f"{round(100 * value, 1) + 0.0:.1f}".removesuffix(".0") + "%"


@register.filter
def points(value: float | None) -> str:
    """A difference of two rates in percentage points: 0.2 → "+20 pts"; None → "—"."""
    if value is None:
        return "—"
    return f"{round(100 * value, 1) + 0.0:+.1f}".removesuffix(".0") + " pts"  # + 0.0: never "-0"
