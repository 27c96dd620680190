"""Our own schema, documented with a full example in docs/ingest.md.

A record holds `steps` (each with a `kind`) plus optional id, agent, model version, outcome,
final result, timings, tokens, cost and metadata. The field mapping applies to id and outcome
only; everything else has fixed names.
"""

from __future__ import annotations

from typing import Any

from flywheel.ingest.parsers.base import (
    STEP_KINDS,
    FieldMapping,
    ParsedStep,
    ParsedTrajectory,
    RecordError,
    arguments_from,
    external_id_from,
    optional_datetime,
    optional_float,
    optional_int,
    optional_str,
    outcome_from,
    text_from,
)

NAME = "native"


def detect(record: dict[str, Any], mapping: FieldMapping) -> bool:
    return isinstance(record.get("steps"), list)


def parse(record: dict[str, Any], mapping: FieldMapping) -> ParsedTrajectory:
    steps = record.get("steps")
    if not isinstance(steps, list) or not steps:
        raise RecordError("a native record needs a non-empty 'steps' list")
    metadata = record.get("metadata", {})
    if not isinstance(metadata, dict):
        raise RecordError("metadata must be an object")
    tokens = _tokens(record, "the record")
    return ParsedTrajectory(
        steps=[_step(step, index) for index, step in enumerate(steps)],
        external_id=external_id_from(record, mapping.id),
        agent=optional_str(record, mapping.agent),
        model_version=optional_str(record, mapping.model_version),
        outcome=outcome_from(record.get(mapping.outcome)),
        final_result=text_from(record.get("final_result")),
        started_at=optional_datetime(record, "started_at"),
        duration_ms=optional_int(record, "duration_ms"),
        input_tokens=tokens.get("input"),
        output_tokens=tokens.get("output"),
        cost=optional_float(record, "cost"),
        metadata=metadata,
        tools=_tools(record),
    )


def _tools(record: dict[str, Any]) -> list[Any]:
    tools = record.get("tools", [])
    if not isinstance(tools, list):
        raise RecordError("tools must be a list of tool schemas")
    return tools


def _tokens(holder: dict[str, Any], where: str) -> dict[str, int | None]:
    tokens = holder.get("tokens", {})
    if not isinstance(tokens, dict):
        raise RecordError(f'tokens of {where} must be an object such as {{"input": 10, "output": 2}}')
    return {"input": optional_int(tokens, "input"), "output": optional_int(tokens, "output")}


def _step(step: Any, index: int) -> ParsedStep:
    where = f"step {index}"
    if not isinstance(step, dict):
        raise RecordError(f"{where} is not an object")
    kind = step.get("kind")
    if kind not in STEP_KINDS:
        raise RecordError(f"{where} has kind {kind!r}; expected one of {', '.join(STEP_KINDS)}")
    arguments, raw = arguments_from(step.get("arguments")) if kind == "tool_call" else (None, "")
    if kind == "tool_call" and not step.get("tool"):
        raise RecordError(f"{where} is a tool_call without 'tool'")
    metadata = step.get("metadata", {})
    if not isinstance(metadata, dict):
        raise RecordError(f"metadata of {where} must be an object")
    tokens = _tokens(step, where)
    return ParsedStep(
        kind=kind,
        text=text_from(step.get("text")),
        tool_name=optional_str(step, "tool", limit=200),
        tool_arguments=arguments,
        tool_arguments_raw=raw,
        tool_call_id=optional_str(step, "call_id", limit=200),
        is_error=kind == "error" or bool(step.get("error")),
        latency_ms=optional_int(step, "latency_ms"),
        input_tokens=tokens["input"],
        output_tokens=tokens["output"],
        metadata=metadata,
    )
