"""The OTLP/HTTP trace receiver's work: decode an export, keep its spans, assemble their traces.

Exports arrive as protobuf (what the OpenTelemetry SDK's HTTP exporter sends) or JSON; both become
the same normalised span dicts. Spans are kept in `OtlpSpan` rows, because one trace may arrive
over several exports; after each export, every trace it touched is assembled again from all its
spans (parser `otlp`) and stored through the ingestion service, or its stored trajectory is
brought up to date in place, so reviews pointing at it survive.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from django.utils import timezone

from flywheel.ingest.models import OtlpSpan

SOURCE = "otlp"


class ExportError(ValueError):
    """The export cannot be decoded at all."""


def _any_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as a Python value."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_any_value(item) for item in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _attributes(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    return {pair["key"]: _any_value(pair.get("value") or {}) for pair in pairs if "key" in pair}


def _hex_id(value: str, size: int) -> str:
    """OTLP/JSON ids are hex; protobuf turned into JSON gives base64. Either way: lowercase hex."""
    if len(value) == size * 2 and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:
        return base64.b64decode(value).hex()
    except ValueError:
        raise ExportError(f"span id {value!r} is neither hex nor base64") from None


def spans_from_json(export: dict[str, Any]) -> list[dict[str, Any]]:
    """Normalised spans of an ExportTraceServiceRequest in OTLP/JSON."""
    spans = []
    for resource_spans in export.get("resourceSpans") or []:
        resource = _attributes((resource_spans.get("resource") or {}).get("attributes") or [])
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                status = span.get("status") or {}
                spans.append(
                    {
                        "trace_id": _hex_id(span["traceId"], 16),
                        "span_id": _hex_id(span["spanId"], 8),
                        "parent_span_id": _hex_id(span["parentSpanId"], 8) if span.get("parentSpanId") else "",
                        "name": span.get("name", ""),
                        "start_ns": int(span.get("startTimeUnixNano") or 0),
                        "end_ns": int(span.get("endTimeUnixNano") or 0),
                        "attributes": _attributes(span.get("attributes") or []),
                        "status_code": _status_code(status.get("code")),
                        "status_message": status.get("message", ""),
                        "resource": resource,
                    }
                )
    return spans


def _status_code(code: Any) -> int:
    names = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
    return names.get(code, 0) if isinstance(code, str) else int(code or 0)


def spans_from_protobuf(body: bytes) -> list[dict[str, Any]]:
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise ExportError(f"the body is not an ExportTraceServiceRequest: {exc}") from exc
    return spans_from_json(MessageToDict(request))


def spans_from_body(body: bytes, content_type: str) -> list[dict[str, Any]]:
    try:
        if content_type.startswith("application/x-protobuf"):
            return spans_from_protobuf(body)
        export = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ExportError(f"the body is not valid OTLP/JSON: {exc}") from exc
    except KeyError as exc:
        raise ExportError(f"a span has no {exc.args[0]}") from exc
    if not isinstance(export, dict):
        raise ExportError("the body is not an ExportTraceServiceRequest object")
    try:
        return spans_from_json(export)
    except KeyError as exc:
        raise ExportError(f"a span has no {exc.args[0]}") from exc


def spans_store(spans: list[dict[str, Any]]) -> set[str]:
    """Keep the spans (a re-sent span replaces its earlier copy); the trace ids they touched."""
    now = timezone.now()
    rows = [
        OtlpSpan(trace_id=span["trace_id"], span_id=span["span_id"], payload=span, received_at=now) for span in spans
    ]
    OtlpSpan.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["trace_id", "span_id"], update_fields=["payload", "received_at"]
    )
    return {span["trace_id"] for span in spans}


def trace_record(trace_id: str) -> dict[str, Any]:
    spans = [row.payload for row in OtlpSpan.objects.filter(trace_id=trace_id)]
    resource: dict[str, Any] = next((span["resource"] for span in spans if span.get("resource")), {})
    return {"trace_id": trace_id, "resource": resource, "spans": spans}
