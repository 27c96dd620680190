"""The one ingestion path every entry point uses (upload page, CLI, and later the API and OTLP).

`records_ingest` takes the records a reader yields, parses each with the chosen format,
deduplicates within each agent (per source and id, or per content hash for records without an
id) and stores trajectories with their steps in batches bounded by count and by bytes; a record
is stored whole or not at all.

Uploads follow the outbox pattern: `upload_create` commits the row, then tries to hand its message
to the broker (`upload_dispatch`, which logs a failure instead of raising it); `uploads_sweep`
re-sends uploads queued with no message behind them and running ones whose progress went stale.
`upload_process` claims with a conditional UPDATE (a queued upload, or a running one whose worker
went silent), commits each batch with how far the file was read, and a later claim continues
after the last committed record, so a killed worker loses nothing and stores nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from functools import partial
from itertools import islice
from typing import IO, Any
from uuid import UUID, uuid4

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.core.validators import validate_slug
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from flywheel.core.db import atomic_reconnecting, bulk_insert
from flywheel.core.models import Agent
from flywheel.core.selectors import ingest_agent_names
from flywheel.core.services import audit_record, outbox_due, outbox_send, tools_normalize
from flywheel.ingest.catalogue import Observed, catalogues_update, observe_calls
from flywheel.ingest.models import Feedback, OtlpSpan, Step, Trajectory, Upload
from flywheel.ingest.parsers import FORMAT_CHOICES, FieldMapping, ParsedTrajectory, RecordError, parse_record
from flywheel.ingest.prefetch import ahead
from flywheel.ingest.reader import FileProblem, RawRecord, ReadLimits, read_records
from flywheel.ingest.redaction import Redactor
from flywheel.ingest.signals import feedback_received, trajectories_stored

logger = logging.getLogger(__name__)
SEARCH_TEXT_CHARS = 20_000
DEFAULT_AGENT = "default"


@dataclass(frozen=True)
class IngestOptions:
    format: str = "auto"
    mapping: FieldMapping = FieldMapping()
    agent: str = ""  # for records that name no agent; DEFAULT_AGENT when empty
    source: str = ""  # the dedup namespace for ids; the agent's name when empty
    upload_id: UUID | None = None
    redactor: Redactor | None = None
    # The agents the caller may ingest into (`flywheel.core.selectors.ingest_agent_names`); None: any.
    agents_allowed: frozenset[str] | None = None


@dataclass
class ItemResult:
    line: int
    status: str  # stored | duplicate | rejected
    trajectory_id: UUID | None = None
    reason: str = ""


@dataclass
class IngestReport:
    read: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0
    redactions: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    failure: str = ""
    last_line: int = 0  # the line of the last record with a result

    def add(self, result: ItemResult) -> None:
        self.read += 1
        self.last_line = max(self.last_line, result.line)
        if result.status == "stored":
            self.stored += 1
        elif result.status == "duplicate":
            self.duplicates += 1
        else:
            self.reject(result.line, result.reason)

    def reject(self, line: int, reason: str) -> None:
        self.rejected += 1
        if len(self.errors) < settings.INGEST_ERRORS_KEPT:
            self.errors.append({"line": line, "reason": reason})

    def copy(self) -> IngestReport:
        return replace(self, errors=list(self.errors))

    def take(self, other: IngestReport) -> None:
        """Become `other`: the counts of a batch, once its transaction has committed."""
        for item in fields(self):
            setattr(self, item.name, getattr(other, item.name))

    def as_dict(self) -> dict[str, Any]:
        summary = {key: getattr(self, key) for key in ("read", "stored", "duplicates", "rejected", "errors")}
        if self.redactions:
            summary["redactions"] = self.redactions
        if self.failure:
            summary["failure"] = self.failure
        return summary


@dataclass
class _Pending:
    line: int
    parsed: ParsedTrajectory
    source: str
    content_hash: str
    redactions: int = 0
    size: int = 0  # the record's JSON length: what batches and read-ahead are budgeted by

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The dedup key, within the record's agent: one agent's record never answers for another's."""
        if self.parsed.external_id:
            return ("id", self.parsed.agent, self.source, self.parsed.external_id)
        return ("hash", self.parsed.agent, "", self.content_hash)


def read_limits() -> ReadLimits:
    return ReadLimits(
        max_record_bytes=settings.INGEST_MAX_RECORD_BYTES,
        max_decompressed_bytes=settings.INGEST_MAX_DECOMPRESSED_BYTES,
        max_depth=settings.INGEST_MAX_DEPTH,
    )


def stream_ingest(
    *,
    stream: IO[bytes],
    options: IngestOptions,
    on_batch: Callable[[IngestReport], None] | None = None,
    report: IngestReport | None = None,
) -> IngestReport:
    """Read a file's records (JSONL or a JSON array, maybe gzipped) and ingest them.

    Reading and parsing run a little ahead in a thread (`prefetch.ahead`, bounded by bytes as well
    as records), so they overlap the database's work on the batch before; storing stays in the
    caller's thread. Given the `report` of an earlier, interrupted run, the first `report.read`
    records already have their results: they are read past, not stored again.
    """
    report = report if report is not None else IngestReport()
    records = islice(_read_guarded(stream), report.read, None)
    prepared = ahead(
        (_prepare(record, options) for record in records),
        size=_prepared_size,
        max_bytes=settings.INGEST_READ_AHEAD_BYTES,
    )
    try:
        _prepared_ingest(prepared, options, report, on_batch, None)
    except FileProblem as problem:
        report.failure = problem.reason
        report.read += 1
        report.reject(problem.line or report.read + 1, problem.reason)
    return report


def _read_guarded(stream: IO[bytes]) -> Generator[RawRecord, None, None]:
    """The reader's records; a failing read of the file (a disk or network error) ends them as a FileProblem."""
    try:
        yield from read_records(stream, read_limits())
    except OSError as exc:
        raise FileProblem(f"the file could not be read: {exc}") from exc


def _prepared_size(item: _Pending | ItemResult) -> int:
    return item.size if isinstance(item, _Pending) else len(item.reason)


def records_ingest(
    *,
    records: Iterable[RawRecord],
    options: IngestOptions,
    report: IngestReport | None = None,
    on_batch: Callable[[IngestReport], None] | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
) -> IngestReport:
    """Parse, deduplicate and store records in batches; every record gets exactly one result."""
    report = report if report is not None else IngestReport()
    _prepared_ingest((_prepare(record, options) for record in records), options, report, on_batch, on_result)
    return report


def _prepared_ingest(
    prepared: Generator[_Pending | ItemResult, None, None],
    options: IngestOptions,
    report: IngestReport,
    on_batch: Callable[[IngestReport], None] | None,
    on_result: Callable[[ItemResult], None] | None,
) -> None:
    agents: dict[str, Agent] = {}
    batch: list[_Pending] = []
    batch_bytes = 0
    flushed_at = time.monotonic()

    def store() -> tuple[IngestReport, dict[str, Agent], list[ItemResult]]:
        # Counted on copies: a try that loses its connection leaves the report and the agents
        # (one created in that transaction is gone with it) as they were, for the next try.
        counted, known = report.copy(), dict(agents)
        counted.redactions += sum(pending.redactions for pending in batch)
        results = _store_batch(batch, options, known)
        for result in results:
            counted.add(result)
        if on_batch:
            on_batch(counted)
        return counted, known, results

    def flush() -> None:
        nonlocal batch_bytes, flushed_at
        # One transaction: the batch's rows and the progress `on_batch` records commit together,
        # and a database restart meanwhile runs the batch again whole.
        counted, known, results = atomic_reconnecting(store, what=f"ingest batch of {len(batch)}")
        report.take(counted)
        agents.update(known)
        if on_result:
            for result in results:
                on_result(result)
        batch.clear()
        batch_bytes, flushed_at = 0, time.monotonic()

    # closing: a failed store stops the reading thread at once, not when the iterator is collected.
    with closing(prepared):
        try:
            for pending_or_result in prepared:
                if isinstance(pending_or_result, ItemResult):
                    report.add(pending_or_result)
                    if on_result:
                        on_result(pending_or_result)
                else:
                    batch.append(pending_or_result)
                    batch_bytes += pending_or_result.size
                if _batch_due(len(batch), batch_bytes, flushed_at):
                    flush()
        except FileProblem:
            flush()  # the records before the problem are good: store them, then report it
            raise
        flush()


def _batch_due(count: int, nbytes: int, flushed_at: float) -> bool:
    """Full by count or bytes; or due by time, so progress (the heartbeat) moves through rejected lines too."""
    return (
        count >= settings.INGEST_BATCH_SIZE
        or nbytes >= settings.INGEST_BATCH_BYTES
        or time.monotonic() - flushed_at >= settings.INGEST_PROGRESS_SECONDS
    )


def _prepare(record: RawRecord, options: IngestOptions) -> _Pending | ItemResult:
    if record.value is None:
        return ItemResult(record.line, "rejected", reason=record.error or "unreadable record")
    value, redactions = options.redactor.redact(record.value) if options.redactor else (record.value, 0)
    try:
        parsed = parse_record(value, options.format, options.mapping)
        parsed.tools = tools_normalize(parsed.tools)
    except RecordError as exc:
        return ItemResult(record.line, "rejected", reason=str(exc))
    except ValidationError as exc:
        return ItemResult(record.line, "rejected", reason=f"tool schemas: {' '.join(exc.messages)}")
    except Exception as exc:  # a parser bug costs this line only; parsers raise RecordError for bad input
        logger.exception("line %s: the parser failed", record.line)
        return ItemResult(record.line, "rejected", reason=f"internal error while parsing ({type(exc).__name__})")
    parsed.agent = parsed.agent or options.agent or DEFAULT_AGENT
    try:
        validate_slug(parsed.agent)
    except ValidationError:
        return ItemResult(
            record.line, "rejected", reason=f"agent name {parsed.agent!r} must be letters, digits, - or _"
        )
    if options.agents_allowed is not None and parsed.agent not in options.agents_allowed:
        return ItemResult(record.line, "rejected", reason=f"agent {parsed.agent!r}: not an agent you are a member of")
    # Only records without an id dedupe on content; the others need only their size, which the
    # reader measured as it read them (serialized here only for records built in memory).
    if parsed.external_id:
        content_hash, size = "", record.size if record.size is not None else len(_compact_json(value))
    else:
        canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        content_hash, size = hashlib.sha256(canonical.encode()).hexdigest(), len(canonical)
    return _Pending(record.line, parsed, options.source or parsed.agent, content_hash, redactions, size)


_compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _existing_keys(batch: list[_Pending]) -> dict[tuple[str, str, str, str], UUID]:
    """The stored trajectories these records duplicate, looked up within each record's agent."""
    ids_by_source: dict[tuple[str, str], list[str]] = {}
    hashes_by_agent: dict[str, list[str]] = {}
    for pending in batch:
        kind, agent, source, value = pending.key
        if kind == "id":
            ids_by_source.setdefault((agent, source), []).append(value)
        else:
            hashes_by_agent.setdefault(agent, []).append(value)
    found: dict[tuple[str, str, str, str], UUID] = {}
    for (agent, source), ids in ids_by_source.items():
        rows = Trajectory.objects.filter(agent__name=agent, source=source, external_id__in=ids)
        found.update(
            {("id", agent, source, external_id): pk for external_id, pk in rows.values_list("external_id", "id")}
        )
    for agent, hashes in hashes_by_agent.items():
        rows = Trajectory.objects.filter(agent__name=agent, external_id="", content_hash__in=hashes)
        found.update(
            {("hash", agent, "", content_hash): pk for content_hash, pk in rows.values_list("content_hash", "id")}
        )
    return found


def _store_batch(batch: list[_Pending], options: IngestOptions, agents: dict[str, Agent]) -> list[ItemResult]:
    if not batch:
        return []
    existing = _existing_keys(batch)
    results: dict[int, ItemResult] = {}
    fresh: list[tuple[int, _Pending, UUID]] = []
    for position, pending in enumerate(batch):
        if pending.key in existing:
            results[position] = ItemResult(pending.line, "duplicate", existing[pending.key])
        else:
            existing[pending.key] = uuid4()
            fresh.append((position, pending, existing[pending.key]))
    for name in {pending.parsed.agent for _, pending, _ in fresh} - set(agents):
        agents[name] = agent_ensure(name=name)
    try:
        with transaction.atomic():
            _insert(fresh, options, agents)
        results.update({pos: ItemResult(p.line, "stored", tid) for pos, p, tid in fresh})
    except IntegrityError:
        # Another writer stored some of these meanwhile: fall back to one record at a time.
        results.update({pos: _store_one(p, tid, options, agents) for pos, p, tid in fresh})
    _catalogues_from([pending for position, pending in enumerate(batch) if results[position].status == "stored"])
    _stored_announce([r.trajectory_id for r in results.values() if r.status == "stored" and r.trajectory_id])
    return [results[position] for position in range(len(batch))]


def _stored_announce(trajectory_ids: list[UUID]) -> None:
    """Send `trajectories_stored` once these rows are committed; a failing receiver never fails the ingest.

    A signal, not a call: triage (suggestions) sits above ingest and connects to it, so ingest knows
    nothing of it. `robust`: the receiver's error is logged and the stored rows stay stored (a lambda,
    not a functools.partial: Django names a robust callback that failed by its `__qualname__`).
    """
    if trajectory_ids:
        transaction.on_commit(lambda: trajectories_stored.send(sender=Trajectory, trajectory_ids=trajectory_ids),
                              robust=True)  # fmt: skip


def _catalogues_from(stored: list[_Pending]) -> None:
    declared: dict[str, list[dict[str, Any]]] = {}
    observed: dict[str, Observed] = {}
    for pending in stored:
        if pending.parsed.tools:
            declared.setdefault(pending.parsed.agent, []).extend(pending.parsed.tools)
        else:
            observe_calls(pending.parsed, observed.setdefault(pending.parsed.agent, {}))
    catalogues_update(declared=declared, observed=observed)


def _store_one(pending: _Pending, trajectory_id: UUID, options: IngestOptions, agents: dict[str, Agent]) -> ItemResult:
    try:
        with transaction.atomic():
            _insert([(0, pending, trajectory_id)], options, agents)
    except IntegrityError:
        found = _existing_keys([pending]).get(pending.key)
        return ItemResult(pending.line, "duplicate", found)
    return ItemResult(pending.line, "stored", trajectory_id)


def _insert(fresh: list[tuple[int, _Pending, UUID]], options: IngestOptions, agents: dict[str, Agent]) -> None:
    now = timezone.now()
    trajectories: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for offset, (_, pending, trajectory_id) in enumerate(fresh):
        # A microsecond apart, so the list (newest first) keeps the order of the file.
        ingested_at = now + timedelta(microseconds=offset)
        trajectories.append(_trajectory_row(pending, trajectory_id, agents[pending.parsed.agent], options, ingested_at))
        steps.extend(_step_rows(pending.parsed, trajectory_id))
    bulk_insert(Trajectory, trajectories)
    bulk_insert(Step, steps)


def _trajectory_row(
    pending: _Pending, trajectory_id: UUID, agent: Agent, options: IngestOptions, ingested_at: datetime
) -> dict[str, Any]:
    parsed = pending.parsed
    return {
        "id": trajectory_id,
        "agent_id": agent.pk,
        "upload_id": options.upload_id,
        "source": pending.source,
        "external_id": parsed.external_id,
        "content_hash": pending.content_hash,
        "model_version": parsed.model_version,
        "outcome": parsed.outcome,
        "final_result": parsed.final_result,
        "started_at": parsed.started_at,
        "duration_ms": parsed.duration_ms,
        "input_tokens": parsed.input_tokens,
        "output_tokens": parsed.output_tokens,
        "cost": parsed.cost,
        "metadata": parsed.metadata,
        "step_count": len(parsed.steps),
        "has_error": any(step.is_error for step in parsed.steps),
        "search_text": _search_text(parsed),
        "ingested_at": ingested_at,
    }


def _step_rows(parsed: ParsedTrajectory, trajectory_id: UUID) -> list[dict[str, Any]]:
    return [
        {
            "trajectory_id": trajectory_id,
            "index": index,
            "kind": step.kind,
            "text": step.text,
            "tool_name": step.tool_name,
            "tool_arguments": step.tool_arguments,
            "tool_arguments_raw": step.tool_arguments_raw,
            "tool_call_id": step.tool_call_id,
            "is_error": step.is_error,
            "latency_ms": step.latency_ms,
            "input_tokens": step.input_tokens,
            "output_tokens": step.output_tokens,
            "metadata": step.metadata,
        }
        for index, step in enumerate(parsed.steps)
    ]


def _search_text(parsed: ParsedTrajectory) -> str:
    parts = [parsed.external_id, parsed.final_result]
    for step in parsed.steps:
        parts.append(step.text[:2000])
        if step.tool_name:
            parts.append(step.tool_name)
    return "\n".join(part for part in parts if part)[:SEARCH_TEXT_CHARS]


def traces_assemble(*, trace_ids: Iterable[str], options: IngestOptions) -> list[ItemResult]:
    """Assemble each trace from all its stored spans; store it, or refresh its trajectory in place."""
    from flywheel.ingest.otlp import trace_record

    agents: dict[str, Agent] = {}
    results = []
    for trace_id in sorted(trace_ids):
        prepared = _prepare(RawRecord(0, trace_record(trace_id)), options)
        if isinstance(prepared, ItemResult):
            results.append(ItemResult(0, "rejected", reason=f"trace {trace_id}: {prepared.reason}"))
        else:
            results.append(_trace_store(trace_id, prepared, options, agents))
    return results


@transaction.atomic
def _trace_store(trace_id: str, prepared: _Pending, options: IngestOptions, agents: dict[str, Agent]) -> ItemResult:
    """A trace of one call that the chat endpoint recorded enriches that record; any other is stored or refreshed."""
    call = prepared.parsed.metadata.get("response_id", "")
    if call:
        _call_lock(call)
        served = Trajectory.objects.filter(agent__name=prepared.parsed.agent, source=SERVED_SOURCE,
                                           external_id=call).first()  # fmt: skip
        if served is not None:
            return _served_enrich(served, trace_id, prepared.parsed)
    existing = Trajectory.objects.filter(
        agent__name=prepared.parsed.agent, source=prepared.source, external_id=trace_id
    ).first()
    if existing is None:
        return _store_batch([prepared], options, agents)[0]
    return _trajectory_refresh(existing, prepared, agents)


# --- one call, two reports -------------------------------------------------------------------
# The chat endpoint records each answer (source `served`, id = the answer's id), and a client
# instrumented with OpenTelemetry may export the same call as a trace (source `otlp`). They are
# one trajectory, whichever comes first: the served record is kept (it knows the exact version
# and adapter, and feedback finds it by the answer's id) and the trace is folded into its
# metadata under `otlp`. Only a trace of that one call and nothing else is folded: a trace of
# several calls (an agent's episode) is a trajectory of its own, its calls' ids in `response_ids`.

SERVED_SOURCE = "served"


def served_call_ingest(*, record: dict[str, Any], options: IngestOptions) -> ItemResult:
    """Store the chat endpoint's record of one call (its `id` is the answer's id), once.

    Where the exported trace of the same call was stored first, that trajectory becomes this
    record in place (same row: its id, reviews and feedback stay), the trace kept under `otlp`.
    """
    prepared = _prepare(RawRecord(0, value=record), options)
    if isinstance(prepared, ItemResult):
        return prepared
    answer_id = prepared.parsed.external_id
    with transaction.atomic():
        if answer_id:
            _call_lock(answer_id)
        traced = _traced_call(answer_id, prepared.parsed.agent) if answer_id else None
        if traced is None or _existing_keys([prepared]):  # a second delivery: a duplicate, as ingest says
            return _store_batch([prepared], options, {})[0]
        prepared.parsed.metadata["otlp"] = _trace_summary(traced.external_id, traced.metadata, traced.duration_ms)
        return _trajectory_refresh(traced, prepared, {})


def _traced_call(answer_id: str, agent_name: str) -> Trajectory | None:
    """The stored trajectory of a trace that is this one call and nothing else, or None."""
    from flywheel.ingest.otlp import SOURCE

    trace_ids = OtlpSpan.objects.filter(response_id=answer_id).values_list("trace_id", flat=True)
    return Trajectory.objects.filter(agent__name=agent_name, source=SOURCE, external_id__in=list(trace_ids),
                                     metadata__response_id=answer_id).first()  # fmt: skip


def _served_enrich(served: Trajectory, trace_id: str, traced: ParsedTrajectory) -> ItemResult:
    """Fold a trace of the served call into its record: the trace's summary, and tokens the record lacked."""
    metadata = {**served.metadata, "otlp": _trace_summary(trace_id, traced.metadata, traced.duration_ms)}
    Trajectory.objects.filter(pk=served.pk).update(
        metadata=metadata,
        input_tokens=served.input_tokens if served.input_tokens is not None else traced.input_tokens,
        output_tokens=served.output_tokens if served.output_tokens is not None else traced.output_tokens,
    )
    return ItemResult(0, "duplicate", served.id)


def _trace_summary(trace_id: str, metadata: dict[str, Any], duration_ms: int | None) -> dict[str, Any]:
    """What a trace adds to the served record of its call: its id, resource, other spans, the client's duration."""
    kept: dict[str, Any] = {key: metadata[key] for key in ("resource", "other_spans", "models") if key in metadata}
    return {"trace_id": trace_id, "client_duration_ms": duration_ms, **kept}


def _call_lock(answer_id: str) -> None:
    """Serialize the two reports of one call until the transaction ends (PostgreSQL; SQLite writes one at a time)."""
    connection = transaction.get_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"call:{answer_id}"])


@transaction.atomic
def _trajectory_refresh(trajectory: Trajectory, pending: _Pending, agents: dict[str, Agent]) -> ItemResult:
    agents.setdefault(pending.parsed.agent, agent_ensure(name=pending.parsed.agent))
    row = _trajectory_row(pending, trajectory.id, agents[pending.parsed.agent], IngestOptions(), trajectory.ingested_at)
    for name in ("id", "upload_id", "ingested_at"):
        row.pop(name)
    Trajectory.objects.filter(pk=trajectory.pk).update(**row)
    Step.objects.filter(trajectory=trajectory).delete()
    bulk_insert(Step, _step_rows(pending.parsed, trajectory.id))
    _catalogues_from([pending])
    _stored_announce([trajectory.id])
    return ItemResult(pending.line, "stored", trajectory.id)


def agent_ensure(*, name: str) -> Agent:
    """The agent with this name, created (tool catalogue to be inferred) when it is new."""
    agent = Agent.objects.filter(name=name).first()
    if agent is not None:
        return agent
    try:
        with transaction.atomic():
            agent = Agent(name=name, tools_source=Agent.ToolsSource.INFERRED)
            agent.full_clean()
            agent.save()
            audit_record(actor=None, action="agent.create", target=agent, data={"by": "ingest"})
            return agent
    except IntegrityError:
        return Agent.objects.get(name=name)


# --- uploads -------------------------------------------------------------------------------


def _file_digest(file: UploadedFile) -> str:
    digest = hashlib.sha256()
    for chunk in file.chunks():
        digest.update(chunk)
    file.seek(0)
    return digest.hexdigest()


def redactor_build(*, patterns: Sequence[str], custom: Sequence[str]) -> Redactor | None:
    if not patterns and not custom:
        return None
    try:
        return Redactor.build(patterns, custom)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


def ingest_options_validate(*, format: str, mapping: dict[str, str], agent_name: str, source: str) -> FieldMapping:
    if format not in FORMAT_CHOICES:
        raise ValidationError(f"unknown format {format!r}; choose one of {', '.join(FORMAT_CHOICES)}")
    if agent_name:
        validate_slug(agent_name)
    if len(source) > 100:
        raise ValidationError("source is longer than 100 characters")
    try:
        return FieldMapping.from_pairs(mapping)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


@transaction.atomic
def upload_create(
    *,
    user: User,
    file: UploadedFile,
    format: str,
    mapping: dict[str, str],
    agent_name: str = "",
    source: str = "",
    redact_patterns: Sequence[str] = (),
    redact_custom: Sequence[str] = (),
) -> Upload:
    """Store the file and queue it for processing on the `default` queue.

    The message is sent after the commit; a broker that cannot take it leaves the upload queued
    ("waiting for a worker") for the sweeper to re-send, and the caller sees no error.
    """
    field_mapping = ingest_options_validate(format=format, mapping=mapping, agent_name=agent_name, source=source)
    redactor_build(patterns=list(redact_patterns), custom=list(redact_custom))
    upload = Upload(
        uploaded_by=user,
        original_name=(file.name or "upload")[:255],
        size=file.size or 0,
        sha256=_file_digest(file),
        format=format,
        mapping=field_mapping.as_pairs(),
        agent_name=agent_name,
        source=source,
        redact_patterns=list(redact_patterns),
        redact_custom=list(redact_custom),
    )
    upload.file.save(f"{uuid4().hex}-{upload.original_name}"[-200:], file, save=False)
    upload.full_clean()
    upload.save()
    audit_record(actor=user, action="upload.create", target=upload, data={"size": upload.size, "format": format})
    transaction.on_commit(lambda: upload_dispatch(upload_id=upload.id), robust=True)
    return upload


class UploadLost(Exception):
    """Another worker has claimed this upload (this one was taken for lost): stop without writing."""


def upload_dispatch(*, upload_id: UUID) -> bool:
    """Hand the upload's message to the broker and mark it dispatched; False (logged) when the broker refused."""
    from flywheel.ingest.tasks import process_upload

    return outbox_send(send=process_upload.delay, model=Upload, row_id=upload_id)


def uploads_sweep(
    *,
    stale_after: timedelta | None = None,
    resend_after: timedelta | None = None,
    grace: timedelta | None = None,
) -> list[UUID]:
    """Re-send uploads whose message may be lost; the ids sent.

    Running with progress older than `stale_after` (its worker died): back to queued, progress
    kept, and re-sent at once; failed instead once out of attempts. Queued with no message sent
    (a broker outage at upload) once `grace` has passed, or sent longer than `resend_after` ago
    and still unclaimed: re-sent. A duplicate message is harmless: the claim lets one worker in.
    """
    now = timezone.now()
    stale = now - (stale_after if stale_after is not None else timedelta(seconds=settings.INGEST_STALE_SECONDS))
    requeued = [pk for pk in _uploads_lost(stale) if _upload_requeue_or_fail(pk, stale)]
    due = outbox_due(since="updated_at", resend_after=resend_after, grace=grace)
    waiting = Upload.objects.filter(due, status=Upload.Status.QUEUED)
    waiting_ids = waiting.exclude(pk__in=requeued).order_by("created_at").values_list("pk", flat=True)
    ids = requeued + list(waiting_ids[: settings.DISPATCH_SWEEP_LIMIT])
    return [pk for pk in ids if upload_dispatch(upload_id=pk)]


def _uploads_lost(stale: datetime) -> list[UUID]:
    lost = Upload.objects.filter(status=Upload.Status.RUNNING, heartbeat_at__lt=stale).order_by("created_at")
    return list(lost.values_list("pk", flat=True)[: settings.DISPATCH_SWEEP_LIMIT])


def _upload_requeue_or_fail(upload_id: UUID, stale: datetime) -> bool:
    """Put a lost upload back in the queue (True), or fail it when its attempts are spent; guarded, like a claim."""
    upload = Upload.objects.get(pk=upload_id)
    now = timezone.now()
    still_lost = Upload.objects.filter(
        pk=upload_id, status=Upload.Status.RUNNING, heartbeat_at__lt=stale, attempts=upload.attempts
    )
    if upload.attempts < settings.INGEST_MAX_ATTEMPTS:
        return bool(still_lost.update(status=Upload.Status.QUEUED, dispatched_at=None, updated_at=now))
    failure = f"its worker was lost {upload.attempts} times; reading stopped after line {upload.lines_read}"
    if still_lost.update(status=Upload.Status.FAILED, failure=failure, finished_at=now, updated_at=now):
        upload.status = Upload.Status.FAILED
        _upload_raw_discard(upload)
    return False


def _upload_claim(upload_id: UUID | str) -> Upload | None:
    """Take a queued upload, or a running one whose worker went silent; None when it is gone or someone has it.

    One conditional UPDATE: of two claims at once, one finds the row changed and claims nothing.
    Each claim counts an attempt; progress writes are fenced by it (`_upload_progress_save`).
    """
    now = timezone.now()
    stale = now - timedelta(seconds=settings.INGEST_STALE_SECONDS)
    claimable = Q(status=Upload.Status.QUEUED) | Q(status=Upload.Status.RUNNING, heartbeat_at__lt=stale)
    claimed = Upload.objects.filter(claimable, pk=upload_id, attempts__lt=settings.INGEST_MAX_ATTEMPTS).update(
        status=Upload.Status.RUNNING, attempts=F("attempts") + 1, heartbeat_at=now,
        started_at=Coalesce("started_at", Value(now)), updated_at=now,
    )  # fmt: skip
    return Upload.objects.get(pk=upload_id) if claimed else None


def upload_process(*, upload_id: UUID | str) -> Upload | None:
    """Ingest an upload from where it was left, saving progress with every batch. Safe to run twice."""
    upload = _upload_claim(upload_id)
    if upload is None:
        return None
    try:
        return _upload_run(upload)
    except (UploadLost, DatabaseError):
        # Taken over, or the database went away: the row stays running; a later claim resumes it.
        logger.warning("upload %s: attempt %d stopped", upload.id, upload.attempts, exc_info=True)
        raise
    except Exception as exc:
        logger.exception("upload %s failed", upload.id)
        Upload.objects.filter(pk=upload.pk, attempts=upload.attempts).update(
            status=Upload.Status.FAILED, failure=f"internal error: {type(exc).__name__}", finished_at=timezone.now()
        )
        upload.status = Upload.Status.FAILED
        _upload_raw_discard(upload)
        raise


def _upload_run(upload: Upload) -> Upload:
    options = IngestOptions(
        format=upload.format,
        mapping=FieldMapping.from_pairs(upload.mapping),
        agent=upload.agent_name,
        source=upload.source,
        upload_id=upload.id,
        redactor=redactor_build(patterns=upload.redact_patterns, custom=upload.redact_custom),
        agents_allowed=ingest_agent_names(user=upload.uploaded_by) if upload.uploaded_by else None,
    )
    if upload.read:
        logger.info("upload %s: attempt %d resumes after line %d", upload.id, upload.attempts, upload.lines_read)
    with upload.file.open("rb") as raw:

        def save_progress(report: IngestReport) -> None:
            _upload_progress_save(upload, report, bytes_read=raw.tell())

        report = stream_ingest(stream=raw, options=options, on_batch=save_progress, report=_report_so_far(upload))
    upload.status = _final_status(report)
    finished = partial(_upload_progress_save, upload, report, bytes_read=upload.size, status=upload.status,
                       failure=report.failure, finished_at=timezone.now())  # fmt: skip
    atomic_reconnecting(finished, what=f"upload {upload.id}: its end")
    _upload_raw_discard(upload)
    logger.info("upload %s: %s", upload.id, json.dumps(report.as_dict())[:500])
    upload.refresh_from_db()
    return upload


def _report_so_far(upload: Upload) -> IngestReport:
    """The counts committed by earlier attempts: a resumed run continues them."""
    return IngestReport(
        read=upload.read, stored=upload.stored, duplicates=upload.duplicates, rejected=upload.rejected,
        redactions=upload.redactions, errors=list(upload.errors), last_line=upload.lines_read,
    )  # fmt: skip


def _final_status(report: IngestReport) -> str:
    """Succeeded when read to its end; partial when reading stopped after some records; failed before any."""
    if not report.failure:
        return Upload.Status.SUCCEEDED
    return Upload.Status.PARTIAL if report.read > 1 else Upload.Status.FAILED


def _upload_progress_save(upload: Upload, report: IngestReport, *, bytes_read: int, **fields: Any) -> None:
    """Record the counts and how far the file was read, in the caller's transaction; UploadLost if taken over."""
    counts = {name: getattr(report, name) for name in ("read", "stored", "duplicates", "rejected", "redactions")}
    now = timezone.now()
    saved = Upload.objects.filter(pk=upload.pk, status=Upload.Status.RUNNING, attempts=upload.attempts).update(
        **counts, errors=report.errors, lines_read=report.last_line, bytes_read=bytes_read, heartbeat_at=now,
        updated_at=now, **fields,
    )  # fmt: skip
    if not saved:
        raise UploadLost(f"upload {upload.id}: attempt {upload.attempts} was taken over")


def _upload_raw_discard(upload: Upload) -> None:
    """Delete the raw file once processed: always when redaction was asked for (it holds what was redacted),
    after success unless INGEST_KEEP_RAW_UPLOADS keeps it; a failed or partial file stays for a look."""
    redacted = bool(upload.redact_patterns or upload.redact_custom)
    if not upload.file or (
        not redacted and (upload.status != Upload.Status.SUCCEEDED or settings.INGEST_KEEP_RAW_UPLOADS)
    ):
        return
    upload.file.delete(save=False)
    Upload.objects.filter(pk=upload.pk).update(file="")


FEEDBACK_TEXT_CHARS = 10_000


def feedback_add(*, trajectory: Trajectory, value: Any, comment: Any = "", end_user: Any = "",
                 sent_by: User | None) -> Feedback:  # fmt: skip
    """Store an end user's feedback on `trajectory`: `value` "up", "down" or a finite number; ValidationError else."""
    if isinstance(value, str) and value in Feedback.Thumb.values:
        thumb, score = value, None
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        thumb, score = "", float(value)
    else:
        raise ValidationError(f'value must be "up", "down" or a number, not {json.dumps(value)[:100]}')
    for name, text in (("comment", comment), ("user_id", end_user)):
        if not isinstance(text, str):
            raise ValidationError(f"{name} must be a string")
    if len(comment) > FEEDBACK_TEXT_CHARS:
        raise ValidationError(f"comment is longer than {FEEDBACK_TEXT_CHARS} characters")
    feedback = Feedback(trajectory=trajectory, thumb=thumb, score=score, comment=comment, end_user=end_user,
                        sent_by=sent_by)  # fmt: skip
    feedback.full_clean()
    feedback.save()
    # As for stored trajectories: listeners (triage's queue rules) learn of it once it is committed, and
    # a failing one never fails the feedback.
    transaction.on_commit(lambda: feedback_received.send(sender=Feedback, trajectory_ids=[trajectory.pk]),
                          robust=True)  # fmt: skip
    return feedback
