"""Lenient value equality for the `tool_call` and `binary` verifiers: equal as a user means it.

Two argument values are equal when they denote the same thing: 5, 5.0 and "5"; "Alex" and
" alex "; "2 PM", "2:00 pm" and "14:00"; "2024-03-05", "03/05/2024" and "March 5, 2024";
True and "true"; a tuple and a list with equal items; objects with equal keys and values.
Slash dates are read month first (US order), as WorkBench and BFCL write them.
Lists keep their order: [lat, lon] is not [lon, lat]. BFCL's strict rules are elsewhere
(`trainer.verifiers.bfcl`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_TIME = re.compile(r"^(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?\s*([ap])\.?\s*m\.?$|^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_DATE_FORMATS = (
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%m/%d/%Y",
    "%m-%d-%Y",
    "%B %d, %Y",
    "%B %d %Y",
    "%b %d, %Y",
    "%b %d %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%d %B, %Y",
    "%A, %B %d, %Y",
)
_DATETIME_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M")
_BOOLEAN_WORDS = {"true": True, "false": False}
_LONGEST_DATE = 40


def values_equal(actual: Any, expected: Any) -> bool:
    """Whether a model's argument value means the same as an expected one."""
    if isinstance(expected, Mapping) or isinstance(actual, Mapping):
        return _mappings_equal(actual, expected)
    if isinstance(expected, (list, tuple)) or isinstance(actual, (list, tuple)):
        return _sequences_equal(actual, expected)
    return canonical_scalar(actual) == canonical_scalar(expected)


def _mappings_equal(actual: Any, expected: Any) -> bool:
    if not (isinstance(actual, Mapping) and isinstance(expected, Mapping)):
        return False
    if set(actual) != set(expected):
        return False
    return all(values_equal(actual[key], expected[key]) for key in expected)


def _sequences_equal(actual: Any, expected: Any) -> bool:
    if not (isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple))):
        return False
    if len(actual) != len(expected):
        return False
    return all(values_equal(a, e) for a, e in zip(actual, expected, strict=True))


def canonical_scalar(value: Any) -> tuple[str, Any]:
    """A (kind, value) pair under which scalars that mean the same compare equal."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return _canonical_number(float(value))
    if isinstance(value, str):
        return _canonical_text(value)
    return ("other", value)


def _canonical_number(number: float) -> tuple[str, Any]:
    if math.isnan(number) or math.isinf(number):
        return ("number", str(number))
    # Twelve significant digits absorb float noise such as 0.1 + 0.2 without merging real values.
    return ("number", float(f"{number:.12g}"))


@lru_cache(maxsize=8192)
def _canonical_text(text: str) -> tuple[str, Any]:
    folded = " ".join(text.split()).casefold()
    if folded in _BOOLEAN_WORDS:
        return ("bool", _BOOLEAN_WORDS[folded])
    if _NUMBER.match(folded):
        return _canonical_number(float(folded))
    if len(folded) > _LONGEST_DATE or not any(character.isdigit() for character in folded):
        return ("text", folded)
    for parse in (_as_time, _as_date, _as_datetime):
        parsed = parse(folded)
        if parsed is not None:
            return parsed
    return ("text", folded)


def _as_time(text: str) -> tuple[str, Any] | None:
    match = _TIME.match(text)
    if match is None:
        return None
    if match.group(4):
        hour, minute, second, meridiem = match.group(1), match.group(2), match.group(3), match.group(4)
    else:
        hour, minute, second, meridiem = match.group(5), match.group(6), match.group(7), None
    hours = int(hour)
    if meridiem is not None:
        if not 1 <= hours <= 12:
            return None
        hours = hours % 12 + (12 if meridiem == "p" else 0)
    minutes, seconds = int(minute or 0), int(second or 0)
    if hours > 23 or minutes > 59 or seconds > 59:
        return None
    return ("time", (hours, minutes, seconds))


def _as_date(text: str) -> tuple[str, Any] | None:
    for layout in _DATE_FORMATS:
        try:
            return ("date", datetime.strptime(text, layout).date())
        except ValueError:
            continue
    return None


def _as_datetime(text: str) -> tuple[str, Any] | None:
    for layout in _DATETIME_FORMATS:
        try:
            moment = datetime.strptime(text.upper(), layout)
        except ValueError:
            continue
        return ("datetime", moment)
    return None
