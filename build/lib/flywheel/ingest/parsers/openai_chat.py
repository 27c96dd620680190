"""Records holding an OpenAI chat messages list, as agents log them and tau-bench stores them.

Assistant messages become an `assistant` step for their text and one `tool_call` step per entry
of `tool_calls` (arguments are JSON strings; invalid ones are kept raw for triage); `role: "tool"`
messages become `tool_result` steps, named after the call they answer. Where the messages, id,
outcome and metadata live comes from the field mapping. Without a metadata field, every other
top-level field is kept as metadata (tau-bench's `info` holds the task and its ground truth).
Tokens come from an OpenAI `usage` object (`prompt_tokens`, `completion_tokens`), the duration
from `duration_ms` and the cost from `cost`, where the record has them (the app's recorded chat
completions do).
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
    optional_float,
    optional_int,
    optional_str,
    outcome_from,
    text_from,
)

NAME = "openai-chat"
ROLE_KINDS = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
# Tool results that start like this are failures the agent has to recover from.
ERROR_PREFIXES = ("error", "exception", "traceback")


def detect(record: dict[str, Any], mapping: FieldMapping) -> bool:
    return isinstance(record.get(mapping.messages), list)


def parse(record: dict[str, Any], mapping: FieldMapping) -> ParsedTrajectory:
    messages = record.get(mapping.messages)
    if not isinstance(messages, list) or not messages:
        raise RecordError(f"the record needs a non-empty '{mapping.messages}' list of chat messages")
    steps = _steps(messages)
    final = next((step.text for step in reversed(steps) if step.kind == "assistant" and step.text), "")
    usage = _usage(record)
    return ParsedTrajectory(
        steps=steps,
        external_id=external_id_from(record, mapping.id),
        agent=optional_str(record, mapping.agent),
        model_version=optional_str(record, mapping.model_version),
        outcome=outcome_from(record.get(mapping.outcome)),
        final_result=final,
        duration_ms=optional_int(record, "duration_ms"),
        input_tokens=usage["prompt_tokens"],
        output_tokens=usage["completion_tokens"],
        cost=optional_float(record, "cost"),
        metadata=_metadata(record, mapping),
        tools=record["tools"] if isinstance(record.get("tools"), list) else [],
    )


def _usage(record: dict[str, Any]) -> dict[str, int | None]:
    usage = record.get("usage") or {}
    if not isinstance(usage, dict):
        raise RecordError('usage must be an object such as {"prompt_tokens": 10, "completion_tokens": 2}')
    return {name: optional_int(usage, name) for name in ("prompt_tokens", "completion_tokens")}


def _metadata(record: dict[str, Any], mapping: FieldMapping) -> dict[str, Any]:
    if mapping.metadata in record:
        metadata = record[mapping.metadata]
        if not isinstance(metadata, dict):
            raise RecordError(f"'{mapping.metadata}' must be an object")
        return metadata
    consumed = {mapping.messages, mapping.agent, mapping.model_version}
    return {key: value for key, value in record.items() if key not in consumed}


def _steps(messages: list[Any]) -> list[ParsedStep]:
    steps: list[ParsedStep] = []
    tool_names: dict[str, str] = {}
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RecordError(f"message {index} is not an object")
        role = message.get("role")
        if role == "tool":
            steps.append(_tool_result(message, index, tool_names))
        elif isinstance(role, str) and role in ROLE_KINDS:
            steps.extend(_message_steps(message, index, tool_names))
        else:
            raise RecordError(f"message {index} has role {role!r}; expected system, user, assistant or tool")
    return steps


def _message_steps(message: dict[str, Any], index: int, tool_names: dict[str, str]) -> list[ParsedStep]:
    kind = ROLE_KINDS[message["role"]]
    text = text_from(message.get("content"), f"the content of message {index}")
    steps = [ParsedStep(kind=kind, text=text)] if text or not message.get("tool_calls") else []
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise RecordError(f"tool_calls of message {index} must be a list")
    for call in tool_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RecordError(f"a tool call in message {index} has no function name")
        arguments, raw = arguments_from(function.get("arguments"))
        call_id = id_text(call.get("id"), f"a tool call id in message {index}")
        tool_names[call_id] = function["name"]
        steps.append(
            ParsedStep(
                kind="tool_call",
                tool_name=function["name"][:200],
                tool_arguments=arguments,
                tool_arguments_raw=raw,
                tool_call_id=call_id,
            )
        )
    return steps


def _tool_result(message: dict[str, Any], index: int, tool_names: dict[str, str]) -> ParsedStep:
    call_id = id_text(message.get("tool_call_id"), f"tool_call_id of message {index}")
    text = text_from(message.get("content"), f"the content of message {index}")
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise RecordError(f"name of message {index} must be a string")
    return ParsedStep(
        kind="tool_result",
        text=text,
        tool_name=(name or tool_names.get(call_id, ""))[:200],
        tool_call_id=call_id,
        is_error=text.lstrip().lower().startswith(ERROR_PREFIXES),
    )
