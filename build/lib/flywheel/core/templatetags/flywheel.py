"""Template filters shared by every app."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import template

register = template.Library()


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON for <pre> blocks; autoescaping still applies to the result."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


@register.filter
def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


@register.filter
def minutes(value: timedelta) -> str:
    """A duration in whole minutes, as a person says it: "15 minutes", "1 minute"."""
    count = max(1, round(value.total_seconds() / 60))
    return f"{count} minute{'s' if count != 1 else ''}"
