"""The ingestion API: `POST /api/v1/trajectories`, a batch in, one result per item out (207).

Like Langfuse's ingestion API: each item is stored, found to be a duplicate (a retried batch is
harmless) or rejected with its reason, and one bad item never costs the others. The body is a JSON
array, `{"batch": [...]}`, or JSON Lines, optionally gzipped; query parameters choose the format,
agent, source, field mapping (`map=messages=traj`, repeated) and redaction (`redact=email,api_key`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.roles import Perm
from flywheel.ingest import otlp, services
from flywheel.ingest.reader import (
    NUL_ESCAPE,
    NUL_REASON,
    FileProblem,
    RawRecord,
    decode_object_allowing_nul,
    read_records,
)
from flywheel.ingest.services import (
    IngestOptions,
    ItemResult,
    ingest_options_validate,
    read_limits,
    records_ingest,
    redactor_build,
)


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _read_body(request: HttpRequest, limit: int) -> bytes | None:
    """The body, or None when it is over `limit` (checked before and while reading)."""
    if int(request.META.get("CONTENT_LENGTH") or 0) > limit:
        return None
    body = request.read(limit + 1)
    return None if len(body) > limit else body


def _items(body: bytes) -> list[RawRecord]:
    """The batch's items, numbered from 0; raises FileProblem when the body cannot be read at all."""
    if body.lstrip()[:1] == b"{":
        try:
            value, _ = decode_object_allowing_nul(body.decode("utf-8"), settings.INGEST_MAX_DEPTH)
        except UnicodeDecodeError:
            value = None  # read line by line below, so only the bad line is refused
        if value is not None and isinstance(value.get("batch"), list):
            return [_wrapped(index, item) for index, item in enumerate(value["batch"])]
    records: Iterator[RawRecord] = read_records(io.BytesIO(body), read_limits())
    return [RawRecord(index, record.value, record.error) for index, record in enumerate(records)]


def _wrapped(index: int, item: Any) -> RawRecord:
    if isinstance(item, dict):
        if NUL_ESCAPE in json.dumps(item):
            return RawRecord(index, error=NUL_REASON)
        return RawRecord(index, value=item)
    return RawRecord(index, error=f"a JSON {type(item).__name__}, not an object")


def options_from_query(request: HttpRequest) -> IngestOptions:
    query = request.GET
    pairs = dict(item.partition("=")[::2] for item in query.getlist("map"))
    mapping = ingest_options_validate(
        format=query.get("format", "auto"),
        mapping=pairs,
        agent_name=query.get("agent", ""),
        source=query.get("source", ""),
    )
    patterns = query.get("redact", ",".join(settings.INGEST_REDACT_DEFAULT))
    redactor = redactor_build(
        patterns=[name for name in patterns.split(",") if name], custom=query.getlist("redact_pattern")
    )
    return IngestOptions(
        format=query.get("format", "auto"),
        mapping=mapping,
        agent=query.get("agent", ""),
        source=query.get("source", ""),
        redactor=redactor,
    )


def _result_json(result: ItemResult) -> dict[str, Any]:
    if result.status == "rejected":
        return {"index": result.line, "status": "rejected", "error": result.reason}
    return {"index": result.line, "status": result.status, "id": str(result.trajectory_id)}


def _otlp_response(request: HttpRequest, rejected_spans: int, message: str) -> HttpResponse:
    """ExportTraceServiceResponse, encoded like the request, with partial success when spans were refused."""
    if request.content_type == "application/x-protobuf":
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        response = ExportTraceServiceResponse()
        if rejected_spans:
            response.partial_success.rejected_spans = rejected_spans
            response.partial_success.error_message = message
        return HttpResponse(response.SerializeToString(), content_type="application/x-protobuf")
    body = {"partialSuccess": {"rejectedSpans": rejected_spans, "errorMessage": message}} if rejected_spans else {}
    return JsonResponse(body)


@permission_required(Perm.INGEST, api=True)
@require_POST
def otlp_traces(request: AuthedRequest) -> HttpResponse:
    """OTLP/HTTP trace export (protobuf or JSON): GenAI spans become trajectories, trace by trace."""
    body = _read_body(request, settings.API_MAX_BODY_BYTES)
    if body is None:
        return _error(413, f"the body is larger than {settings.API_MAX_BODY_BYTES} bytes")
    if request.headers.get("Content-Encoding", "").lower() == "gzip":
        body = _gunzip(body, settings.API_MAX_BODY_BYTES * 10)
        if body is None:
            return _error(400, "the gzip body is corrupt or decompresses past the limit")
    try:
        spans = otlp.spans_from_body(body, request.content_type or "")
    except otlp.ExportError as exc:
        return _error(400, str(exc))
    redactor = redactor_build(patterns=settings.INGEST_REDACT_DEFAULT, custom=[])
    options = IngestOptions(format="otlp", source=otlp.SOURCE, redactor=redactor)
    results = services.traces_assemble(trace_ids=otlp.spans_store(spans), options=options)
    refused = [result.reason for result in results if result.status == "rejected"]
    refused_traces = {reason.split(":", 1)[0].removeprefix("trace ") for reason in refused}
    rejected_spans = sum(1 for span in spans if span["trace_id"] in refused_traces)
    return _otlp_response(request, rejected_spans, "; ".join(refused)[:1000])


def _gunzip(body: bytes, cap: int) -> bytes | None:
    import zlib

    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, cap + 1)
    except zlib.error:
        return None
    return None if len(data) > cap or not decompressor.eof else data


@permission_required(Perm.INGEST, api=True)
@require_POST
def trajectories(request: AuthedRequest) -> JsonResponse:
    try:
        options = options_from_query(request)
    except ValidationError as exc:
        return _error(400, " ".join(exc.messages))
    body = _read_body(request, settings.API_MAX_BODY_BYTES)
    if body is None:
        return _error(413, f"the body is larger than {settings.API_MAX_BODY_BYTES} bytes")
    try:
        items = _items(body)
    except FileProblem as problem:
        return _error(400, f"the body cannot be read: {problem.reason}")
    if len(items) > settings.API_MAX_BATCH_ITEMS:
        return _error(413, f"the batch has {len(items)} items; at most {settings.API_MAX_BATCH_ITEMS} are accepted")
    results: list[ItemResult] = []
    report = records_ingest(records=items, options=options, on_result=results.append)
    summary = {key: value for key, value in report.as_dict().items() if key != "errors"}
    body_out = {"results": [_result_json(r) for r in sorted(results, key=lambda r: r.line)], "summary": summary}
    return JsonResponse(body_out, status=207)
