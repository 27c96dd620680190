"""OpenTelemetry GenAI spans of one trace, assembled into a trajectory.

A record here is `{"trace_id", "resource": {attributes}, "spans": [span, ...]}` with spans as
`flywheel.ingest.otlp` normalises them from OTLP (JSON or protobuf). Spans are read in start
order, following the GenAI semantic conventions:

- `chat` (and other inference) spans: the first one's `gen_ai.system_instructions` and
  `gen_ai.input.messages` open the conversation; later ones add only what follows the last
  assistant message of their input (the new user turn, tool responses); every one adds its
  `gen_ai.output.messages` (text and `tool_call` parts), with `gen_ai.usage.*` tokens and the
  span's duration as latency. `gen_ai.tool.definitions` become the agent's declared tools.
- `execute_tool` spans: a `tool_result` step from `gen_ai.tool.call.result` (an error status marks
  it failed), preceded by its `tool_call` when no chat output announced that call.

`span_problem` says whether one span can join a trace (its shape, and GenAI attributes that
this assembly can read); the receiver refuses spans that fail it, and `parse` skips any stored
span that fails it, so one bad span never spoils its trace.

OpenInference spans (`openinference.span.kind` LLM and TOOL, as Phoenix's instrumentations emit
them) are read through `parsers.openinference`, which gives them these GenAI attributes. A GenAI
inference event received over `/v1/logs` (an instrumentation's `event_only` content capture) is a
stand-in span marked `flywheel.event_of`: its messages join the span it details, or, while that
span has not come, it stands for the span.

The agent is `flywheel.agent`, else `gen_ai.agent.name`, else the resource's `service.name` (not
the SDK's `unknown_service` default), else the agent that a response model of the form `name:vN`
names; the model version tag is `flywheel.model_version` (resource or span), else `service.version`,
else a response (or request) model `name:vN` of the trajectory's agent: what the app's chat
endpoint answers with. The outcome is `flywheel.outcome` on any span, else failure when a span
has an error status. Spans that are not GenAI spans, and attributes nothing reads, are kept as
metadata. The calls' response ids (`gen_ai.response.id`) are kept too: a trace of one call and
nothing else records `response_id`, by which the ingest service knows it for the chat endpoint's
own record of the same call.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from django.utils.text import slugify

from flywheel.ingest.parsers.base import (
    INT_MAX,
    FieldMapping,
    ParsedStep,
    ParsedTrajectory,
    RecordError,
    arguments_from,
    outcome_from,
    storable_problem,
    text_from,
)
from flywheel.ingest.parsers.openinference import genai_attributes
from flywheel.ingest.reader import decode_value

NAME = "otlp"
STATUS_ERROR = 2
TOOL_SPAN = "execute_tool"
INFERENCE_SPANS = {"chat", "text_completion", "generate_content", "invoke_agent"}
READ_ATTRIBUTES = {
    "gen_ai.operation.name", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.tool.definitions", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "flywheel.outcome", "flywheel.model_version", "flywheel.agent", "gen_ai.request.model", "gen_ai.response.model",
    "gen_ai.response.id", "flywheel.event_of",
}  # fmt: skip
EVENT_OF = "flywheel.event_of"  # on an inference event received as a log: the span it details
VERSION_TAG = re.compile(r"([A-Za-z0-9_-]{1,100}):v[0-9]{1,9}")
SDK_DEFAULT_SERVICE = "unknown_service"  # what the OpenTelemetry SDKs name a service nobody named
NO_CONTENT = (
    "its chat spans carry no messages (yet): turn on the instrumentation's content capture "
    "(opentelemetry-instrumentation-openai-v2: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only, "
    "or event_only with its logs exported to /v1/logs)"
)
MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model")
ROLE_KINDS = {"system": "system", "user": "user", "assistant": "assistant"}
SPAN_FIELDS: dict[str, type] = {
    "trace_id": str, "span_id": str, "name": str, "start_ns": int, "end_ns": int, "attributes": dict,
    "status_code": int, "status_message": str, "resource": dict,
}  # fmt: skip
ATTRIBUTE_JSON_DEPTH = 64


def detect(record: dict[str, Any], mapping: FieldMapping) -> bool:
    return isinstance(record.get("spans"), list) and "trace_id" in record


def parse(record: dict[str, Any], mapping: FieldMapping) -> ParsedTrajectory:
    trace_id, stored = record.get("trace_id"), record.get("spans")
    if not isinstance(trace_id, str) or not isinstance(stored, list):
        raise RecordError("a trace record needs a 'trace_id' string and a 'spans' list")
    good = [span for span in stored if span_problem(span) is None]
    spans = _events_joined(sorted((genai_view(span) for span in good), key=lambda span: span["start_ns"]))
    if not spans:
        raise RecordError("the trace has no spans")
    resource = record["resource"] if isinstance(record.get("resource"), dict) else {}
    assembly = _Assembly()
    for span in spans:
        assembly.add(span)
    if not assembly.steps:
        if assembly.inference_spans:
            raise RecordError(NO_CONTENT)
        raise RecordError("the trace has no GenAI spans (gen_ai.operation.name) to build a trajectory from")
    every = [resource, *(span["attributes"] for span in spans)]
    start, end = spans[0]["start_ns"], max(span["end_ns"] for span in spans)
    metadata: dict[str, Any] = {"resource": resource, "other_spans": assembly.other_spans,
                                "models": sorted(assembly.models)}  # fmt: skip
    if len(spans) < len(stored):
        metadata["skipped_spans"] = len(stored) - len(spans)
    if assembly.response_ids:
        metadata["response_ids"] = assembly.response_ids
    if assembly.response_ids and assembly.inference_spans == 1 and not assembly.tool_spans:
        metadata["response_id"] = assembly.response_ids[0]
    agent = _agent_of(every, resource, assembly.models)
    return ParsedTrajectory(
        steps=assembly.steps,
        external_id=trace_id,
        agent=agent,
        model_version=_version_of(every, resource, agent, assembly.tags),
        outcome=_outcome(spans),
        final_result=next((s.text for s in reversed(assembly.steps) if s.kind == "assistant" and s.text), ""),
        started_at=datetime.fromtimestamp(start / 1e9, tz=UTC),
        duration_ms=min(INT_MAX, int((end - start) / 1e6)),
        input_tokens=min(INT_MAX, assembly.input_tokens) or None,
        output_tokens=min(INT_MAX, assembly.output_tokens) or None,
        metadata=metadata,
        tools=assembly.tools,
    )


def _events_joined(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inference events (from logs) joined to the spans they detail; one whose span is not here stands for it."""
    detailed = {span["span_id"]: span for span in spans if EVENT_OF not in span["attributes"]}
    joined = []
    for span in spans:
        target = detailed.get(span["attributes"].get(EVENT_OF))
        if target is None:
            joined.append(span)
        else:  # the event's messages, the span's own attributes and timing
            target["attributes"] = {**span["attributes"], **target["attributes"]}
    return joined


def span_problem(span: Any) -> str | None:
    """Why a normalised span cannot join a trace, or None: its fields, or GenAI attributes that do not read."""
    if not isinstance(span, dict):
        return "the span is not an object"
    for name, kind in SPAN_FIELDS.items():
        value = span.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"the span's {name} is missing or not a {kind.__name__}"
    try:
        assembly = _Assembly()
        assembly.add(genai_view(span))
        _outcome([span])
        _tools_check(assembly.tools)
    except RecordError as exc:
        return f"span {span['name'][:80]!r}: {exc}"
    return storable_problem(ParsedTrajectory(steps=assembly.steps))


def _tools_check(tools: list[Any]) -> None:
    from django.core.exceptions import ValidationError

    from flywheel.core.services import tools_normalize

    try:
        tools_normalize(tools)
    except ValidationError as exc:
        raise RecordError(f"gen_ai.tool.definitions: {' '.join(exc.messages)}") from None


def span_agent(span: dict[str, Any]) -> str:
    """The agent one span names on its own (its attributes, else its resource), as a trace names it."""
    resource = span.get("resource") or {}
    attributes = genai_attributes(span.get("attributes") or {})
    models = {str(attributes[key]) for key in MODEL_KEYS if attributes.get(key)}
    return _agent_of([resource, attributes], resource, models)


def span_response_id(span: dict[str, Any]) -> str:
    """The response id of the model call a span records (GenAI or OpenInference), or ""."""
    attributes = genai_attributes(span.get("attributes") or {})
    value = attributes.get("gen_ai.response.id")
    return value[:255] if isinstance(value, str) and attributes.get("gen_ai.operation.name") in INFERENCE_SPANS else ""


def genai_view(span: dict[str, Any]) -> dict[str, Any]:
    """The span with its attributes in GenAI form (OpenInference spans translated)."""
    return {**span, "attributes": genai_attributes(span["attributes"])}


def _agent_of(attribute_sets: list[dict[str, Any]], resource: dict[str, Any], models: set[str]) -> str:
    named = _first(attribute_sets, "flywheel.agent", "gen_ai.agent.name")
    service = resource.get("service.name")
    if not named and isinstance(service, str) and not service.startswith(SDK_DEFAULT_SERVICE):
        named = service
    if not named:
        named = next((match[1] for model in sorted(models) if (match := VERSION_TAG.fullmatch(model))), "")
    return slugify(named or "")[:100]


def _version_of(attribute_sets: list[dict[str, Any]], resource: dict[str, Any], agent: str, tags: list[str]) -> str:
    """The declared version tag, else the last call's model when it is `agent:vN` (the chat endpoint's answer)."""
    declared = _first(attribute_sets, "flywheel.model_version") or resource.get("service.version")
    if declared:
        return str(declared)[:100]
    return next((tag for tag in reversed(tags) if (match := VERSION_TAG.fullmatch(tag)) and match[1] == agent), "")


def _first(attribute_sets: list[dict[str, Any]], *names: str) -> Any:
    for name in names:
        for attributes in attribute_sets:
            if attributes.get(name) not in (None, ""):
                return attributes[name]
    return None


def _outcome(spans: list[dict[str, Any]]) -> str:
    declared = _first([span["attributes"] for span in spans], "flywheel.outcome")
    if declared is not None:
        return outcome_from(declared)
    return "failure" if any(span["status_code"] == STATUS_ERROR for span in spans) else "unknown"


def _json_attribute(attributes: dict[str, Any], name: str) -> Any:
    value = attributes.get(name)
    if isinstance(value, str):
        decoded, problem = decode_value(value, ATTRIBUTE_JSON_DEPTH)
        if problem:
            raise RecordError(f"span attribute {name} is not valid JSON: {problem}")
        return decoded
    return value


def _messages_attribute(attributes: dict[str, Any], name: str) -> list[dict[str, Any]]:
    messages = _json_attribute(attributes, name) or []
    if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
        raise RecordError(f"span attribute {name} must be a list of {{role, parts}} messages")
    return messages


class _Assembly:
    """Steps built span by span, remembering which calls and results were already seen."""

    def __init__(self) -> None:
        self.steps: list[ParsedStep] = []
        self.tools: list[Any] = []
        self.other_spans: list[dict[str, Any]] = []
        self.models: set[str] = set()
        self.calls_seen: set[str] = set()
        self.results_seen: set[str] = set()
        self.input_tokens = self.output_tokens = 0
        self.opened = False
        self.inference_spans = self.tool_spans = 0
        self.response_ids: list[str] = []
        self.tags: list[str] = []  # each call's response model, else its request model, in order

    def add(self, span: dict[str, Any]) -> None:
        attributes = span["attributes"]
        operation = attributes.get("gen_ai.operation.name")
        if operation == TOOL_SPAN:
            self._tool_span(span)
        elif operation in INFERENCE_SPANS:
            self._inference_span(span)
        else:
            self.other_spans.append({"name": span["name"], "duration_ms": _duration_ms(span)})

    def _inference_span(self, span: dict[str, Any]) -> None:
        attributes = span["attributes"]
        self.inference_spans += 1
        self.models.update(str(attributes[key]) for key in MODEL_KEYS if attributes.get(key))
        if model := attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model"):
            self.tags.append(str(model))
        if isinstance(response_id := attributes.get("gen_ai.response.id"), str) and response_id:
            self.response_ids.append(response_id[:255])
        if isinstance(tools := _json_attribute(attributes, "gen_ai.tool.definitions"), list):
            self.tools = tools
        inputs = _messages_attribute(attributes, "gen_ai.input.messages")
        if not self.opened:
            instructions = _json_attribute(attributes, "gen_ai.system_instructions")
            if instructions:
                self.steps.append(ParsedStep("system", text=_parts_text(instructions)))
            new_inputs, self.opened = inputs, True
        else:
            last_assistant = max((i for i, m in enumerate(inputs) if m.get("role") == "assistant"), default=-1)
            new_inputs = inputs[last_assistant + 1 :]
        for message in new_inputs:
            self._message(message, span)
        outputs = _messages_attribute(attributes, "gen_ai.output.messages")
        first_output = len(self.steps)
        for message in outputs:
            self._message(message, span)
        input_tokens, output_tokens = (
            _int(attributes, "gen_ai.usage.input_tokens"),
            _int(attributes, "gen_ai.usage.output_tokens"),
        )
        self.input_tokens += input_tokens or 0
        self.output_tokens += output_tokens or 0
        if len(self.steps) > first_output:
            step = self.steps[first_output]
            step.latency_ms, step.input_tokens, step.output_tokens = _duration_ms(span), input_tokens, output_tokens
            step.metadata = _unread(attributes)

    def _message(self, message: Any, span: dict[str, Any]) -> None:
        if not isinstance(message, dict) or not isinstance(message.get("parts", []), list):
            raise RecordError(f"span {span['name']!r} has a message that is not {{role, parts}}")
        role, texts = message.get("role"), []
        for part in message.get("parts", []):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "tool_call":
                self._call(str(part.get("id") or ""), str(part.get("name") or ""), part.get("arguments"))
            elif kind == "tool_call_response":
                self._result(str(part.get("id") or ""), "", text_from(_as_text(part.get("response"))), False, None)
            elif kind in ("text", "reasoning") and part.get("content"):
                texts.append(str(part["content"]))
        if texts and role in ROLE_KINDS:
            self.steps.append(ParsedStep(ROLE_KINDS[role], text="\n".join(texts)))

    def _call(self, call_id: str, name: str, arguments: Any) -> None:
        if call_id and call_id in self.calls_seen:
            return
        self.calls_seen.add(call_id)
        parsed, raw = arguments_from(arguments)
        self.steps.append(
            ParsedStep(
                "tool_call",
                tool_name=name[:200],
                tool_arguments=parsed,
                tool_arguments_raw=raw,
                tool_call_id=call_id[:200],
            )
        )

    def _result(self, call_id: str, name: str, text: str, is_error: bool, latency_ms: int | None) -> None:
        if call_id and call_id in self.results_seen:
            return
        self.results_seen.add(call_id)
        self.steps.append(
            ParsedStep(
                "tool_result",
                text=text,
                tool_name=name[:200],
                tool_call_id=call_id[:200],
                is_error=is_error,
                latency_ms=latency_ms,
            )
        )

    def _tool_span(self, span: dict[str, Any]) -> None:
        attributes = span["attributes"]
        self.tool_spans += 1
        call_id, name = (
            str(attributes.get("gen_ai.tool.call.id") or span["span_id"]),
            str(attributes.get("gen_ai.tool.name") or ""),
        )
        self._call(call_id, name, attributes.get("gen_ai.tool.call.arguments"))
        error = span["status_code"] == STATUS_ERROR
        result = _as_text(attributes.get("gen_ai.tool.call.result")) or (span.get("status_message") if error else "")
        self._result(call_id, name, result or "", error, _duration_ms(span))
        for step in reversed(self.steps):
            if step.kind == "tool_result" and step.tool_call_id == call_id[:200]:
                step.tool_name, step.metadata = name[:200], _unread(attributes)
                break


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _parts_text(instructions: Any) -> str:
    if isinstance(instructions, list):
        return "\n".join(str(part.get("content", "")) for part in instructions if isinstance(part, dict))
    return _as_text(instructions)


def _int(attributes: dict[str, Any], name: str) -> int | None:
    value = attributes.get(name)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _duration_ms(span: dict[str, Any]) -> int:
    return min(INT_MAX, max(0, int((span["end_ns"] - span["start_ns"]) / 1e6)))


def _unread(attributes: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items() if key not in READ_ATTRIBUTES}
