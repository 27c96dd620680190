"""What every parser produces, the field mapping they read, and the helpers they share.

The helpers check the type of everything they read and raise `RecordError` for a wrong one, so a
parser built on them refuses a record instead of failing; `storable_problem` checks what a parser
made against the columns it goes into (integer ranges, lengths).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from flywheel.ingest.reader import decode_value

STEP_KINDS = ("system", "user", "assistant", "tool_call", "tool_result", "human_intervention", "error")
OUTCOMES = ("success", "failure", "unknown")
MAPPING_KEYS = ("messages", "id", "outcome", "metadata", "agent", "model_version")
# PostgreSQL `integer` columns hold these; a bigger count or duration is refused, not truncated.
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
ARGUMENTS_MAX_DEPTH = 64


class RecordError(ValueError):
    """The record cannot be stored; the message says why, for the person who sent it."""


@dataclass(frozen=True)
class FieldMapping:
    """Where a record keeps its parts; `id` may name several fields, joined with ':'."""

    messages: str = "messages"
    id: tuple[str, ...] = ("id",)
    outcome: str = "outcome"
    metadata: str = "metadata"
    agent: str = "agent"
    model_version: str = "model_version"

    @classmethod
    def from_pairs(cls, pairs: dict[str, str]) -> FieldMapping:
        unknown = sorted(set(pairs) - set(MAPPING_KEYS))
        if unknown:
            raise ValueError(f"unknown mapping key {', '.join(unknown)} (known: {', '.join(MAPPING_KEYS)})")
        values: dict[str, Any] = {key: value.strip() for key, value in pairs.items()}
        if "id" in values:
            values["id"] = tuple(part.strip() for part in values["id"].split(",") if part.strip())
        return cls(**values)

    def as_pairs(self) -> dict[str, str]:
        return {key: ",".join(value) if key == "id" else value for key, value in self.__dict__.items()}


@dataclass
class ParsedStep:
    kind: str
    text: str = ""
    tool_name: str = ""
    tool_arguments: Any = None
    tool_arguments_raw: str = ""
    tool_call_id: str = ""
    is_error: bool = False
    latency_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedTrajectory:
    steps: list[ParsedStep]
    external_id: str = ""
    agent: str = ""
    model_version: str = ""
    outcome: str = "unknown"
    final_result: str = ""
    started_at: datetime | None = None
    duration_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Tool schemas the agent was offered, in whatever form the record had them (normalised on storage).
    tools: list[Any] = field(default_factory=list)


def outcome_from(value: Any) -> str:
    """success/failure/unknown from what records carry: a word, a boolean, or a reward (> 0 is success)."""
    if value is None or value == "":
        return "unknown"
    if isinstance(value, bool):
        return "success" if value else "failure"
    if isinstance(value, int | float):
        return "success" if value > 0 else "failure"
    if isinstance(value, str) and value.strip().lower() in OUTCOMES:
        return value.strip().lower()
    if isinstance(value, str) and value.strip().lower() in ("pass", "passed", "ok", "fail", "failed", "error"):
        return "success" if value.strip().lower() in ("pass", "passed", "ok") else "failure"
    raise RecordError(f"outcome {value!r} is not success, failure, unknown, a boolean or a number")


def external_id_from(record: dict[str, Any], fields: tuple[str, ...]) -> str:
    parts = [record.get(name) for name in fields]
    if all(part is None or part == "" for part in parts):
        return ""
    if any(part is None or isinstance(part, dict | list) for part in parts):
        raise RecordError(f"the id fields {', '.join(fields)} must all hold a string or a number")
    joined = ":".join(str(part) for part in parts)
    if len(joined) > 255:
        raise RecordError("the id is longer than 255 characters")
    return joined


def text_from(content: Any, where: str = "content") -> str:
    """Message content as text: a string, or OpenAI's list of parts (text parts joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [_part_text(part, index, where) for index, part in enumerate(content)]
        return "\n".join(text for text in texts if text)
    return json.dumps(content, ensure_ascii=False)


def _part_text(part: Any, index: int, where: str) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise RecordError(f"part {index} of {where} is a {type(part).__name__}, not a string or an object")
    text = part.get("text")
    if text is not None and not isinstance(text, str):
        raise RecordError(f"part {index} of {where} has a text that is a {type(text).__name__}, not a string")
    return text or ""


def id_text(value: Any, where: str) -> str:
    """A call id as text (its first 200 characters): a string or a whole number; anything else is refused."""
    if value is None or value == "":
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RecordError(f"{where} must be a string, not {type(value).__name__}")
    return str(value)[:200]


def arguments_from(raw: Any) -> tuple[Any, str]:
    """(parsed arguments, raw text kept when they are not valid JSON). Strings are parsed as JSON.

    Text that PostgreSQL's JSON could not store (NaN, a lone surrogate, deep nesting) stays raw too.
    """
    if raw is None:
        return {}, ""
    if not isinstance(raw, str):
        return raw, ""
    value, problem = decode_value(raw, ARGUMENTS_MAX_DEPTH)
    return (None, raw) if problem else (value, "")


def optional_int(record: dict[str, Any], name: str) -> int | None:
    value = optional_float(record, name)
    if value is None:
        return None
    if not INT_MIN <= value <= INT_MAX:
        raise RecordError(f"{name} must be between {INT_MIN} and {INT_MAX}")
    return int(value)


def optional_float(record: dict[str, Any], name: str) -> float | None:
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{name} must be a number, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RecordError(f"{name} must be a finite number")
    try:
        return float(value)
    except OverflowError:
        raise RecordError(f"{name} is too large a number") from None


def optional_datetime(record: dict[str, Any], name: str) -> datetime | None:
    value = record.get(name)
    if value is None:
        return None
    try:
        parsed = parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise RecordError(f"{name} must be an ISO 8601 date and time, such as 2026-05-01T14:30:00Z")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def optional_str(record: dict[str, Any], name: str, *, limit: int = 100) -> str:
    value = record.get(name)
    if value is None:
        return ""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise RecordError(f"{name} must be a string")
    if len(str(value)) > limit:
        raise RecordError(f"{name} is longer than {limit} characters")
    return str(value)


def storable_problem(parsed: ParsedTrajectory) -> str | None:
    """Why the trajectory cannot go into its columns (a count out of range, a name too long), or None."""
    limits = (("external_id", 255), ("agent", 100), ("model_version", 100))
    for name, limit in limits:
        if len(getattr(parsed, name)) > limit:
            return f"{name.replace('_', ' ')} is longer than {limit} characters"
    numbers = ("duration_ms", "input_tokens", "output_tokens")
    if problem := _integers_problem(parsed, numbers, "the trajectory"):
        return problem
    if parsed.cost is not None and not math.isfinite(parsed.cost):
        return "cost must be a finite number"
    for index, step in enumerate(parsed.steps):
        if problem := _step_problem(step, f"step {index}"):
            return problem
    return None


def _step_problem(step: ParsedStep, where: str) -> str | None:
    if step.kind not in STEP_KINDS:
        return f"{where} has kind {step.kind!r}"
    if len(step.tool_name) > 200 or len(step.tool_call_id) > 200:
        return f"{where}: a tool name or call id is longer than 200 characters"
    return _integers_problem(step, ("latency_ms", "input_tokens", "output_tokens"), where)


def _integers_problem(holder: Any, names: tuple[str, ...], where: str) -> str | None:
    for name in names:
        value = getattr(holder, name)
        if value is not None and not INT_MIN <= value <= INT_MAX:
            return f"{name} of {where} must be between {INT_MIN} and {INT_MAX}"
    return None
