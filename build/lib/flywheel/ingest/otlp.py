"""The OTLP/HTTP trace (and GenAI event) receiver's work: decode an export, check every span, keep the good ones.

Exports arrive as protobuf (what the OpenTelemetry SDK's HTTP exporter sends) or JSON; both become
the same normalised span dicts. Log exports (`/v1/logs`) are read for one thing: the GenAI
inference event (`gen_ai.client.inference.operation.details`), where an instrumentation whose
content capture is `event_only` puts a call's messages. Each such event becomes a stand-in span of
its trace (its own id, `flywheel.event_of` naming the span it details), which the parser joins to
that span; any other log record is refused, counted and logged like a bad span.

The whole request is checked before anything is stored: a body that cannot be decoded, or whose
structure above the spans is wrong, is an `ExportError` (400); a malformed span (an id that is
not hex, a timestamp that is not a number, attributes of the wrong shape or too deep, GenAI
attributes the parser cannot read) is refused on its own and counted in OTLP's `partial_success`,
and is never stored, so it can never spoil its trace.

Good spans are kept in `OtlpSpan` rows, because one trace may arrive over several exports; after
each export, every trace it touched is assembled again from all its spans (parser `otlp`) and
stored through the ingestion service, or its stored trajectory is brought up to date in place.
Nothing is dropped silently: a refused span, and each span of a trace that cannot be assembled
(no GenAI or OpenInference span in it, or chat spans without their messages), is counted in the
answer's partial success with the reason, and logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from flywheel.ingest.models import OtlpSpan
from flywheel.ingest.parsers.otlp import EVENT_OF, span_agent, span_problem, span_response_id
from flywheel.ingest.reader import decode_any, tree_problem

if TYPE_CHECKING:
    from flywheel.ingest.services import IngestOptions

logger = logging.getLogger(__name__)
SOURCE = "otlp"
# Attribute values nest through arrayValue / kvlistValue; deeper than this is refused.
MAX_ATTRIBUTE_DEPTH = 16
MAX_SPAN_DEPTH = 64  # the raw JSON of one span, attributes included
UINT64_LIMIT = 1 << 64
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
DIGITS = re.compile(r"-?[0-9]{1,20}")
STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
GENAI_EVENT = "gen_ai.client.inference.operation.details"


class ExportError(ValueError):
    """The export cannot be decoded at all."""


class SpanError(ValueError):
    """One span is malformed; the message says why."""


@dataclass
class Export:
    """A decoded request: the spans to keep and one reason per refused span."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _any_value(value: Any, depth: int) -> Any:
    """An OTLP/JSON AnyValue as a Python value; SpanError for a wrong type."""
    if not isinstance(value, dict):
        raise SpanError("an attribute value is not an AnyValue object")
    if depth > MAX_ATTRIBUTE_DEPTH:
        raise SpanError(f"attribute values nest deeper than {MAX_ATTRIBUTE_DEPTH} levels")
    if "stringValue" in value:
        return _typed(value["stringValue"], str, "stringValue")
    if "boolValue" in value:
        return _typed(value["boolValue"], bool, "boolValue")
    if "intValue" in value:
        return _integer(value["intValue"], "intValue", INT64_MIN, INT64_MAX)
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if "arrayValue" in value:
        return [_any_value(item, depth + 1) for item in _values(value["arrayValue"], "arrayValue")]
    if "kvlistValue" in value:
        return _attributes(_values(value["kvlistValue"], "kvlistValue"), depth + 1)
    if "bytesValue" in value:
        return _typed(value["bytesValue"], str, "bytesValue")
    return None


def _typed(value: Any, kind: type, name: str) -> Any:
    if not isinstance(value, kind):
        raise SpanError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _values(container: Any, name: str) -> list[Any]:
    values = container.get("values", []) if isinstance(container, dict) else None
    if not isinstance(values, list):
        raise SpanError(f"{name} must be an object holding a 'values' list")
    return values


def _integer(value: Any, name: str, low: int, high: int) -> int:
    """An integer from a JSON number or a decimal string (OTLP/JSON writes 64-bit integers as strings)."""
    if isinstance(value, str) and DIGITS.fullmatch(value):
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise SpanError(f"{name} must be an integer or a string of digits, not {value!r:.40}")
    if not low <= number <= high:
        raise SpanError(f"{name} {number} is out of range")
    return number


def _double(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpanError(f"doubleValue must be a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise SpanError("doubleValue is too large") from None
    if not math.isfinite(number):
        raise SpanError("doubleValue must be finite")
    return number


def _attributes(pairs: Any, depth: int = 0) -> dict[str, Any]:
    if not isinstance(pairs, list):
        raise SpanError("attributes must be a list of {key, value}")
    attributes = {}
    for pair in pairs:
        if not isinstance(pair, dict) or not isinstance(pair.get("key"), str):
            raise SpanError("an attribute is not a {key, value} object with a string key")
        attributes[pair["key"]] = _any_value(pair.get("value") or {}, depth)
    return attributes


def _hex_id(value: Any, size: int, name: str) -> str:
    """OTLP/JSON ids are hex; protobuf turned into JSON gives base64. Either way: lowercase hex."""
    if not isinstance(value, str):
        raise SpanError(f"{name} must be a string of {size * 2} hex characters, not {type(value).__name__}")
    if len(value) == size * 2 and all(c in "0123456789abcdefABCDEF" for c in value):
        decoded = value.lower()
    else:
        try:
            decoded = base64.b64decode(value, validate=True).hex()
        except (ValueError, binascii.Error):
            raise SpanError(f"{name} {value!r:.40} is neither hex nor base64") from None
    if len(decoded) != size * 2 or not decoded.strip("0"):
        raise SpanError(f"{name} must be {size} bytes and not all zero")
    return decoded


def _list(holder: dict[str, Any], name: str) -> list[Any]:
    value = holder.get(name) or []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ExportError(f"{name} must be a list of objects")
    return value


def export_from_json(export: Any) -> Export:
    """Check every span of an ExportTraceServiceRequest in OTLP/JSON; ExportError above the spans."""
    if not isinstance(export, dict):
        raise ExportError("the body is not an ExportTraceServiceRequest object")
    result = Export()
    for resource_spans in _list(export, "resourceSpans"):
        resource, problem = _resource(resource_spans.get("resource") or {})
        for scope_spans in _list(resource_spans, "scopeSpans"):
            for raw in _list(scope_spans, "spans"):
                _span_into(result, raw, resource, problem)
    return result


def _resource(resource: Any) -> tuple[dict[str, Any], str | None]:
    """The resource's attributes, or why they are malformed (then each of its spans is refused)."""
    try:
        if not isinstance(resource, dict):
            raise SpanError("resource must be an object")
        return _attributes(resource.get("attributes") or []), None
    except SpanError as exc:
        return {}, f"resource attributes: {exc}"


def _span_into(result: Export, raw: dict[str, Any], resource: dict[str, Any], problem: str | None) -> None:
    try:
        if problem:
            raise SpanError(problem)
        span = span_from_json(raw, resource)
    except SpanError as exc:
        name = raw.get("name")
        result.refused.append(f"span {name[:80] if isinstance(name, str) else '?'!r}: {exc}")
        return
    result.spans.append(span)


def span_from_json(raw: dict[str, Any], resource: dict[str, Any]) -> dict[str, Any]:
    """One normalised span, or SpanError naming what is wrong with it."""
    if problem := tree_problem(raw, MAX_SPAN_DEPTH, check_strings=True):
        raise SpanError(problem)
    status = raw.get("status") or {}
    if not isinstance(status, dict):
        raise SpanError("status must be an object")
    start = _integer(raw.get("startTimeUnixNano") or 0, "startTimeUnixNano", 0, UINT64_LIMIT - 1)
    end = _integer(raw.get("endTimeUnixNano") or 0, "endTimeUnixNano", 0, UINT64_LIMIT - 1)
    if end < start:
        raise SpanError("endTimeUnixNano is before startTimeUnixNano")
    span = {
        "trace_id": _hex_id(raw.get("traceId"), 16, "traceId"),
        "span_id": _hex_id(raw.get("spanId"), 8, "spanId"),
        "parent_span_id": _hex_id(raw["parentSpanId"], 8, "parentSpanId") if raw.get("parentSpanId") else "",
        "name": _typed(raw.get("name", ""), str, "name"),
        "start_ns": start,
        "end_ns": end,
        "attributes": _attributes(raw.get("attributes") or []),
        "status_code": _status_code(status.get("code")),
        "status_message": _typed(status.get("message", ""), str, "status.message"),
        "resource": resource,
    }
    if problem := tree_problem(span["resource"], MAX_SPAN_DEPTH, check_strings=True) or span_problem(span):
        raise SpanError(problem)
    return span


def _status_code(code: Any) -> int:
    if isinstance(code, str) and code in STATUS_CODES:
        return STATUS_CODES[code]
    return _integer(code or 0, "status.code", 0, 2)


def logs_from_json(export: Any) -> Export:
    """Check every record of an ExportLogsServiceRequest in OTLP/JSON: GenAI inference events become spans."""
    if not isinstance(export, dict):
        raise ExportError("the body is not an ExportLogsServiceRequest object")
    result = Export()
    for resource_logs in _list(export, "resourceLogs"):
        resource, problem = _resource(resource_logs.get("resource") or {})
        for scope_logs in _list(resource_logs, "scopeLogs"):
            for raw in _list(scope_logs, "logRecords"):
                _event_into(result, raw, resource, problem)
    return result


def _event_into(result: Export, raw: dict[str, Any], resource: dict[str, Any], problem: str | None) -> None:
    name = raw.get("eventName")
    try:
        if problem:
            raise SpanError(problem)
        if name != GENAI_EVENT:
            raise SpanError(f"not the GenAI event the receiver reads ({GENAI_EVENT})")
        span = span_from_json(_event_as_span(raw), resource)
    except SpanError as exc:
        result.refused.append(f"log record {name[:80] if isinstance(name, str) else '?'!r}: {exc}")
        return
    result.spans.append(span)


def _event_as_span(raw: dict[str, Any]) -> dict[str, Any]:
    """An inference event as a span of its trace: an id of its own (stable, so a re-sent event replaces itself)."""
    detailed = _hex_id(raw.get("spanId"), 8, "spanId")
    attributes = raw.get("attributes") or []
    if not isinstance(attributes, list):
        raise SpanError("attributes must be a list of {key, value}")
    at = next((raw[key] for key in ("timeUnixNano", "observedTimeUnixNano") if raw.get(key) not in (None, 0, "0")), 0)
    return {"traceId": raw.get("traceId"), "spanId": hashlib.sha256(f"event:{detailed}".encode()).hexdigest()[:16],
            "name": GENAI_EVENT, "startTimeUnixNano": at, "endTimeUnixNano": at,
            "attributes": [*attributes, {"key": EVENT_OF, "value": {"stringValue": detailed}}]}  # fmt: skip


def _from_protobuf(body: bytes, signal: str) -> Any:
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest() if signal == "traces" else ExportLogsServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError) as exc:
        raise ExportError(f"the body is not an {type(request).__name__}: {exc}") from exc
    return MessageToDict(request)


def export_decode(body: bytes, content_type: str, signal: str = "traces") -> Export:
    """The checked spans of a trace (or logs) export body, protobuf or JSON; ExportError when it cannot be read."""
    read = export_from_json if signal == "traces" else logs_from_json
    if content_type.startswith("application/x-protobuf"):
        return read(_from_protobuf(body, signal))
    try:
        # Bad bytes and NaN become values the span check refuses, so they cost one span, not the request.
        export = decode_any(body.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError) as exc:
        raise ExportError(f"the body is not valid OTLP/JSON: {exc}") from exc
    return read(export)


def foreign_spans_refuse(export: Export, allowed: frozenset[str] | None) -> None:
    """Refuse, before anything is stored, the spans that name an agent outside `allowed` (None: any)."""
    if allowed is None:
        return
    kept = []
    for span in export.spans:
        agent = span_agent(span)
        if agent in allowed:
            kept.append(span)
        else:
            export.refused.append(f"span {span['name'][:80]!r}: agent {agent!r}: not an agent you are a member of")
    export.spans = kept


def spans_store(spans: list[dict[str, Any]]) -> set[str]:
    """Keep the spans (a re-sent span replaces its earlier copy); the trace ids they touched."""
    now = timezone.now()
    rows = [
        OtlpSpan(trace_id=span["trace_id"], span_id=span["span_id"], response_id=span_response_id(span), payload=span,
                 received_at=now)
        for span in spans
    ]  # fmt: skip
    OtlpSpan.objects.bulk_create(rows, update_conflicts=True, unique_fields=["trace_id", "span_id"],
                                 update_fields=["payload", "response_id", "received_at"])  # fmt: skip
    return {span["trace_id"] for span in spans}


def trace_record(trace_id: str) -> dict[str, Any]:
    spans = [row.payload for row in OtlpSpan.objects.filter(trace_id=trace_id)]
    resource: Any = next((span["resource"] for span in spans if isinstance(span, dict) and span.get("resource")), {})
    return {"trace_id": trace_id, "resource": resource, "spans": spans}


def export_ingest(*, export: Export, options: IngestOptions) -> tuple[int, str]:
    """Keep the export's spans and assemble the traces they touched: (spans not used, why), the why logged.

    Spans not used are the refused ones and every span of a trace that could not be assembled; a
    trace whose spans are still to come is assembled again when they come.
    """
    from flywheel.ingest.services import traces_assemble

    foreign_spans_refuse(export, options.agents_allowed)
    results = traces_assemble(trace_ids=spans_store(export.spans), options=options)
    refused = [result.reason for result in results if result.status == "rejected"]
    refused_traces = {reason.split(":", 1)[0].removeprefix("trace ") for reason in refused}
    unassembled = sum(1 for span in export.spans if span["trace_id"] in refused_traces)
    message = "; ".join([*export.refused, *refused])[:1000]
    if export.refused or unassembled:
        logger.warning("OTLP export: %d span(s) refused, %d in traces not assembled: %s", len(export.refused),
                       unassembled, message)  # fmt: skip
    return len(export.refused) + unassembled, message
