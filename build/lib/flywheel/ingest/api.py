"""The ingestion API: `POST /api/v1/trajectories`, a batch in, one result per item out (207).

Like Langfuse's ingestion API: each item is stored, found to be a duplicate (a retried batch is
harmless) or rejected with its reason, and one bad item never costs the others: an item with NaN,
an over-long integer, nesting past the limit, bad UTF-8 or a wrong type is refused alone. The body
is a JSON array, `{"batch": [...]}`, or JSON Lines, optionally gzipped; query parameters choose the
format, agent, source, field mapping (`map=messages=traj`, repeated) and redaction
(`redact=email,api_key`). The body is read as a stream up to `API_MAX_BODY_BYTES`, and a gzipped
one is decompressed up to `API_MAX_DECOMPRESSED_BYTES` (413 past either). Also the OTLP/HTTP trace
endpoint, whose work is in `flywheel.ingest.otlp`, and end users' feedback on a trajectory, by its
id or by the external id the agent knows it by (like Langfuse's scores API).
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_POST

from flywheel.core.access import AuthedRequest, permission_required, rate_limited
from flywheel.core.jsonbody import JsonInputError, body_read, json_object_from_body
from flywheel.core.roles import Perm
from flywheel.core.selectors import ingest_agent_names, ingest_refusal
from flywheel.ingest import otlp, selectors, services
from flywheel.ingest.models import Feedback, Trajectory
from flywheel.ingest.reader import (
    GZIP_MAGIC,
    FileProblem,
    RawRecord,
    decode_any,
    read_array,
    read_records,
    value_problem,
)
from flywheel.ingest.services import (
    IngestOptions,
    ItemResult,
    ingest_options_validate,
    read_limits,
    records_ingest,
    redactor_build,
)

# `{"batch": [` opening a body: the array is then read item by item, as a JSON array body is.
ENVELOPE_OPENING = re.compile(rb'\A\s*\{\s*"batch"\s*:\s*(?=\[)')


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _body(request: HttpRequest) -> bytes:
    """The body, decompressed when gzipped; JsonInputError (413, 400) past the caps or when corrupt."""
    body = body_read(request, max_bytes=settings.API_MAX_BODY_BYTES)
    gzipped = request.headers.get("Content-Encoding", "").lower() == "gzip" or body[:2] == GZIP_MAGIC
    return _gunzip(body, settings.API_MAX_DECOMPRESSED_BYTES) if gzipped else body


def _gunzip(body: bytes, cap: int) -> bytes:
    """Decompress in bounded steps, so a small bomb stops at `cap` without ever holding more."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, cap + 1)
    except zlib.error as exc:
        raise JsonInputError(f"the gzip body is corrupt: {exc}") from None
    if len(data) > cap:
        raise JsonInputError(
            f"the body decompresses to more than {cap} bytes, the API's limit; send smaller batches", status=413
        )
    if not decompressor.eof:
        raise JsonInputError("the gzip body is truncated")
    return data


def _items(body: bytes) -> list[RawRecord]:
    """The batch's items, numbered from 0; raises FileProblem when the body cannot be read at all."""
    if ENVELOPE_OPENING.match(body):
        return _envelope_items(body)
    if body.lstrip()[:1] == b"{" and b'"batch"' in body and (envelope := _envelope(body)) is not None:
        return [_wrapped(index, item) for index, item in enumerate(envelope)]
    return _numbered(read_records(io.BytesIO(body), read_limits()))


def _envelope_items(body: bytes) -> list[RawRecord]:
    """`{"batch": [...]}` read like a JSON array body, item by item; other keys: decoded whole."""
    opening = ENVELOPE_OPENING.match(body)
    array = body[opening.end() if opening else 0 :].rstrip()
    try:
        if not array.endswith(b"}"):
            raise FileProblem("the body ends before the envelope's closing '}'")
        return _numbered(read_array(io.BytesIO(array[:-1]), read_limits()))
    except FileProblem:
        envelope = _envelope(body)
        if envelope is None:
            raise
    return [_wrapped(index, item) for index, item in enumerate(envelope)]


def _numbered(records: Iterator[RawRecord]) -> list[RawRecord]:
    return [RawRecord(index, record.value, record.error) for index, record in enumerate(records)]


def _envelope(body: bytes) -> list[Any] | None:
    """The `batch` list of an object (bad bytes and NaN left for the item check); None when there is none."""
    try:
        value = decode_any(body.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError):
        return None
    return value["batch"] if isinstance(value, dict) and isinstance(value.get("batch"), list) else None


def _wrapped(index: int, item: Any) -> RawRecord:
    problem = value_problem(item, settings.INGEST_MAX_DEPTH, check_strings=True)
    return RawRecord(index, error=problem) if problem else RawRecord(index, value=item)


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
        agents_allowed=ingest_agent_names(user=request.user),
    )


def _result_json(result: ItemResult) -> dict[str, Any]:
    if result.status == "rejected":
        return {"index": result.line, "status": "rejected", "error": result.reason}
    return {"index": result.line, "status": result.status, "id": str(result.trajectory_id)}


def _otlp_response(request: HttpRequest, signal: str, rejected: int, message: str) -> HttpResponse:
    """Export(Trace|Logs)ServiceResponse, encoded like the request, with partial success when some were refused."""
    if request.content_type == "application/x-protobuf":
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        response = ExportTraceServiceResponse() if signal == "traces" else ExportLogsServiceResponse()
        if rejected:
            setattr(response.partial_success, "rejected_spans" if signal == "traces" else "rejected_log_records",
                    rejected)  # fmt: skip
            response.partial_success.error_message = message
        return HttpResponse(response.SerializeToString(), content_type="application/x-protobuf")
    counted = "rejectedSpans" if signal == "traces" else "rejectedLogRecords"
    return JsonResponse({"partialSuccess": {counted: rejected, "errorMessage": message}} if rejected else {})


def _otlp_export(request: AuthedRequest, signal: str) -> HttpResponse:
    try:
        export = otlp.export_decode(_body(request), request.content_type or "", signal)
    except JsonInputError as exc:
        return _error(exc.status, exc.message)
    except otlp.ExportError as exc:
        return _error(400, str(exc))
    redactor = redactor_build(patterns=settings.INGEST_REDACT_DEFAULT, custom=[])
    options = IngestOptions(format="otlp", source=otlp.SOURCE, redactor=redactor,
                            agents_allowed=ingest_agent_names(user=request.user))  # fmt: skip
    rejected, message = otlp.export_ingest(export=export, options=options)
    return _otlp_response(request, signal, rejected, message)


@permission_required(Perm.INGEST, api=True)
@rate_limited("ingest")
@require_POST
def otlp_traces(request: AuthedRequest) -> HttpResponse:
    """OTLP/HTTP trace export (protobuf or JSON): GenAI spans become trajectories, trace by trace.

    The whole request is checked first; refused spans are never stored and are counted in
    `partial_success`, with the spans of traces that cannot be assembled yet.
    """
    return _otlp_export(request, "traces")


@permission_required(Perm.INGEST, api=True)
@rate_limited("ingest")
@require_POST
def otlp_logs(request: AuthedRequest) -> HttpResponse:
    """OTLP/HTTP logs export: GenAI inference events (a call's messages, in `event_only` capture) join their traces.

    Any other log record is refused and counted in `partial_success`, as a bad span is on `/v1/traces`.
    """
    return _otlp_export(request, "logs")


@permission_required(Perm.INGEST, api=True)
@rate_limited("ingest")
@require_POST
def trajectories(request: AuthedRequest) -> JsonResponse:
    try:
        options = options_from_query(request)
    except ValidationError as exc:
        return _error(400, " ".join(exc.messages))
    refusal = ingest_refusal(user=request.user, agent_name=options.agent) if options.agent else None
    if refusal:
        return _error(403, refusal)
    try:
        items = _items(_body(request))
    except JsonInputError as exc:
        return _error(exc.status, exc.message)
    except FileProblem as problem:
        return _error(400, f"the body cannot be read: {problem.reason}")
    if len(items) > settings.API_MAX_BATCH_ITEMS:
        return _error(413, f"the batch has {len(items)} items; at most {settings.API_MAX_BATCH_ITEMS} are accepted")
    results: list[ItemResult] = []
    report = records_ingest(records=items, options=options, on_result=results.append)
    summary = {key: value for key, value in report.as_dict().items() if key != "errors"}
    body_out = {"results": [_result_json(r) for r in sorted(results, key=lambda r: r.line)], "summary": summary}
    return JsonResponse(body_out, status=207)


def _feedback(request: AuthedRequest, trajectory: Trajectory) -> JsonResponse:
    try:
        body = json_object_from_body(request, max_bytes=settings.API_MAX_BODY_BYTES)
        feedback = services.feedback_add(trajectory=trajectory, value=body.get("value"),
                                         comment=body.get("comment", ""), end_user=body.get("user_id", ""),
                                         sent_by=request.user)  # fmt: skip
    except JsonInputError as exc:
        return _error(exc.status, exc.message)
    except ValidationError as exc:
        return _error(400, " ".join(exc.messages))
    return JsonResponse(_feedback_json(feedback), status=201)


def _feedback_json(feedback: Feedback) -> dict[str, Any]:
    return {"id": feedback.pk, "trajectory": str(feedback.trajectory_id), "value": feedback.thumb or feedback.score,
            "comment": feedback.comment, "user_id": feedback.end_user,
            "created_at": feedback.created_at.isoformat()}  # fmt: skip


@permission_required(Perm.INGEST, api=True)
@rate_limited("ingest")
@require_POST
def trajectory_feedback(request: AuthedRequest, trajectory_id: UUID) -> JsonResponse:
    """`POST /api/v1/trajectories/<id>/feedback`: `{"value": "up"|"down"|number, "comment", "user_id"}`; 201."""
    trajectory = selectors.trajectory_visible(viewer=request.user).filter(pk=trajectory_id).first()
    if trajectory is None:
        return _error(404, f"no trajectory {trajectory_id}")
    return _feedback(request, trajectory)


@permission_required(Perm.INGEST, api=True)
@rate_limited("ingest")
@require_POST
def trajectory_feedback_by_external_id(request: AuthedRequest, external_id: str) -> JsonResponse:
    """`POST /api/v1/trajectories/by-external-id/<id>/feedback[?agent=NAME&source=S]`: as by id.

    A served answer's id (`chatcmpl-...`) is the external id of its recorded trajectory. `agent`
    and `source` narrow the search where several of the caller's trajectories share the id.
    """
    found = selectors.trajectory_by_external_id(external_id=external_id, agent_name=request.GET.get("agent", ""),
                                                source=request.GET.get("source", ""), viewer=request.user)  # fmt: skip
    if not found:
        return _error(404, f"no trajectory {external_id!r}")
    if len(found) > 1:
        return _error(409, f"several trajectories have the id {external_id!r}; name one with ?agent=NAME&source=S")
    return _feedback(request, found[0])
