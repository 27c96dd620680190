"""OpenAI Responses API items, as NeMo Gym rollouts carry them.

A record holds `responses_create_params` (`input` items and the `tools` offered) and `response`
(`output` items: `message`, `function_call`, `function_call_output`, `reasoning`), plus a
`reward`. Input and output items are read in order as one conversation. Reasoning items become
assistant steps marked `{"item_type": "reasoning"}` in their metadata, since bad plans show there.
"""

from __future__ import annotations

from typing import Any

from flywheel.ingest.parsers.base import (
    FieldMapping,
    ParsedStep,
    ParsedTrajectory,
    RecordError,
    arguments_from,
    external_id_from,
    id_text,
    optional_int,
    optional_str,
    outcome_from,
    text_from,
)
from flywheel.ingest.parsers.openai_chat import ERROR_PREFIXES, ROLE_KINDS

NAME = "responses"


def detect(record: dict[str, Any], mapping: FieldMapping) -> bool:
    return isinstance(record.get("responses_create_params"), dict) or isinstance(
        (record.get("response") or {}).get("output") if isinstance(record.get("response"), dict) else None, list
    )


def parse(record: dict[str, Any], mapping: FieldMapping) -> ParsedTrajectory:
    params = _object(record, "responses_create_params")
    response = _object(record, "response")
    items = _list(params, "input", "responses_create_params.input") + _list(response, "output", "response.output")
    if not items:
        raise RecordError("the record has no input or output items")
    steps = _steps(items)
    usage: dict[str, Any] = response["usage"] if isinstance(response.get("usage"), dict) else {}
    outcome_field = mapping.outcome if mapping.outcome in record else "reward"
    id_fields = mapping.id if any(record.get(name) for name in mapping.id) else ()
    consumed = {"responses_create_params", "response", outcome_field, *mapping.id}
    return ParsedTrajectory(
        steps=steps,
        external_id=external_id_from(record, id_fields) if id_fields else optional_str(response, "id", limit=255),
        agent=optional_str(record, mapping.agent),
        model_version=optional_str(record, mapping.model_version),
        outcome=outcome_from(record.get(outcome_field)),
        final_result=next((s.text for s in reversed(steps) if s.kind == "assistant" and s.text and not s.metadata), ""),
        input_tokens=optional_int(usage, "input_tokens"),
        output_tokens=optional_int(usage, "output_tokens"),
        metadata={"model": response.get("model"), **{k: v for k, v in record.items() if k not in consumed}},
        tools=_list(params, "tools", "responses_create_params.tools"),
    )


def _object(record: dict[str, Any], name: str) -> dict[str, Any]:
    value = record.get(name) or {}
    if not isinstance(value, dict):
        raise RecordError(f"{name} must be an object")
    return value


def _list(holder: dict[str, Any], name: str, where: str) -> list[Any]:
    value = holder.get(name) or []
    if isinstance(value, str) and name == "input":
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise RecordError(f"{where} must be a list")
    return value


def _steps(items: list[Any]) -> list[ParsedStep]:
    steps: list[ParsedStep] = []
    tool_names: dict[str, str] = {}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise RecordError(f"item {index} is not an object")
        step = _step(item, index, tool_names)
        if step is not None:
            steps.append(step)
    return steps


def _step(item: dict[str, Any], index: int, tool_names: dict[str, str]) -> ParsedStep | None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if not isinstance(role, str) or role not in ROLE_KINDS:
            raise RecordError(f"item {index} is a message with role {role!r}")
        return ParsedStep(kind=ROLE_KINDS[role], text=text_from(item.get("content"), f"the content of item {index}"))
    if kind == "function_call":
        if not isinstance(item.get("name"), str):
            raise RecordError(f"item {index} is a function_call without a name")
        call_id = id_text(item.get("call_id") or item.get("id"), f"the call id of item {index}")
        tool_names[call_id] = item["name"]
        arguments, raw = arguments_from(item.get("arguments"))
        return ParsedStep(
            "tool_call",
            tool_name=item["name"][:200],
            tool_arguments=arguments,
            tool_arguments_raw=raw,
            tool_call_id=call_id,
        )
    if kind == "function_call_output":
        call_id = id_text(item.get("call_id"), f"the call id of item {index}")
        text = text_from(item.get("output"), f"the output of item {index}")
        return ParsedStep(
            "tool_result",
            text=text,
            tool_name=tool_names.get(call_id, "")[:200],
            tool_call_id=call_id,
            is_error=text.lstrip().lower().startswith(ERROR_PREFIXES),
        )
    if kind == "reasoning":
        summary = item.get("summary") or item.get("content")
        return ParsedStep(
            "assistant", text=text_from(summary, f"the summary of item {index}"), metadata={"item_type": "reasoning"}
        )
    return None  # other item types (web search calls, images...) carry nothing to triage yet
