"""Hostile files made from real records, and the invariants every entry point must keep on them.

Shared by `test_properties.py` (a small, derandomized budget in CI) and `bench/fuzz_ingest.py` (a
large one). Real records come from ../shared/external: tau-bench conversations (openai-chat, and
the same turned into our native format), NeMo Gym rollouts (responses), and GenAI traces that the
OpenTelemetry SDK records and encodes (OTLP). A hostile file keeps some records untouched ("good")
and mutates others by type, shape and encoding: a JSON value of any shape put at a random path, a
dropped key, NaN or Infinity, an integer of thousands of digits, nesting far past the limit, bad
UTF-8 or a lone surrogate inside a string, a truncated line, a top-level value that is not an object.

The checks return a list of problems (empty when the invariant holds): every good line stored,
every line accounted for, every refused line reported with its number and a reason, no parser
bug caught by the safety net, no 500. An exception that escapes is the caller's to catch.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

EXTERNAL = Path(__file__).resolve().parents[3].parent / "shared" / "external"
TAU_BENCH = EXTERNAL / "tau_bench" / "gpt-4o-airline.json"
NEMO_ROLLOUTS = sorted((EXTERNAL / "nemo_gym").glob("*/example_rollouts.jsonl"))
TAU_MAPPING = {"messages": "traj", "outcome": "reward", "id": "task_id,trial"}
INTERNAL = "internal error"  # what the per-line safety net writes: a parser bug, never acceptable here
MARK = "\ue000fuzz\ue000"  # a private-use marker, replaced by raw bytes once the line is encoded


# --- real records ---------------------------------------------------------------------------


@cache
def tau_records() -> tuple[dict[str, Any], ...]:
    """A few real tau-bench conversations (the first of each of five tasks), kept small."""
    records = json.loads(TAU_BENCH.read_text())
    return tuple(records[index] for index in (0, 4, 8, 12, 16))


@cache
def nemo_records() -> tuple[dict[str, Any], ...]:
    """The first rollout of each NeMo Gym environment (OpenAI Responses items)."""
    return tuple(json.loads(path.read_text().splitlines()[0]) for path in NEMO_ROLLOUTS)


def native_from_tau(record: dict[str, Any]) -> dict[str, Any]:
    """A tau-bench conversation written in our native format (steps with kinds)."""
    steps: list[dict[str, Any]] = []
    for message in record["traj"]:
        if message["role"] == "tool":
            steps.append({"kind": "tool_result", "text": message["content"], "call_id": message["tool_call_id"]})
            continue
        if message.get("content"):
            steps.append({"kind": message["role"], "text": message["content"]})
        for call in message.get("tool_calls") or []:
            function = call["function"]
            steps.append({"kind": "tool_call", "tool": function["name"], "arguments": function["arguments"],
                          "call_id": call["id"]})  # fmt: skip
    return {"outcome": record["reward"], "steps": steps, "metadata": {"task": record["info"]["task"]}}


@dataclass(frozen=True)
class Format:
    name: str  # the parser (or "auto")
    mapping: dict[str, str]
    records: Callable[[], tuple[dict[str, Any], ...]]
    with_id: Callable[[dict[str, Any], str], dict[str, Any]]


def _tau_with_id(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {**record, "task_id": key, "trial": 0}


def _with_id(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {**record, "id": key}


FORMATS = {
    "openai-chat": Format("openai-chat", TAU_MAPPING, tau_records, _tau_with_id),
    "responses": Format("responses", {}, nemo_records, _with_id),
    "native": Format("native", {}, lambda: tuple(native_from_tau(r) for r in tau_records()), _with_id),
    "auto": Format("auto", {}, lambda: (*nemo_records(), *(native_from_tau(r) for r in tau_records())), _with_id),
}


# --- mutations -------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**31, max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "user", "tool", "tool_call", "function_call", "message", "text", "2026-13-45", "{not"])
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
RAW_VALUES = {
    "nan": "NaN",
    "infinity": "-Infinity",
    "float overflow": "1e400",
    "huge integer": "9" * 5000,
    "deep nesting": "[" * 3000 + "]" * 3000,
    "nesting past the limit": "[" * 70 + "]" * 70,
    "lone surrogate": '"\\udc80 broken"',
    "nul": '"a\\u0000b"',
}
BAD_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys and list indexes), the root excluded."""
    paths: list[tuple[Any, ...]] = []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        paths.append((*prefix, key))
        paths.extend(paths_of(child, (*prefix, key)))
    return paths


def _set(record: Any, path: tuple[Any, ...], value: Any, *, drop: bool = False) -> None:
    holder = record
    for key in path[:-1]:
        holder = holder[key]
    if drop and isinstance(holder, dict):
        del holder[path[-1]]
    else:
        holder[path[-1]] = value


@st.composite
def mutated_line(draw: st.DrawFn, record: dict[str, Any], *, line_level: bool) -> bytes:
    """`record` spoiled one way, as one encoded line (without its newline)."""
    record = copy.deepcopy(record)
    paths = paths_of(record)
    kinds = ["value", "drop", "raw", "bad bytes", "top level"] + (["truncate"] if line_level else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "top level":
        return json.dumps(draw(json_values.filter(lambda v: not isinstance(v, dict)))).encode()
    path = draw(st.sampled_from(paths))
    if kind in ("value", "drop"):
        _set(record, path, draw(json_values), drop=kind == "drop")
        return json.dumps(record, allow_nan=True).encode()
    _set(record, path, MARK)
    encoded = json.dumps(record, ensure_ascii=False).encode()
    if kind == "raw":
        return encoded.replace(
            json.dumps(MARK, ensure_ascii=False).encode(), draw(st.sampled_from(list(RAW_VALUES.values()))).encode()
        )
    if kind == "bad bytes":
        return encoded.replace(MARK.encode(), b"x" + draw(st.sampled_from(BAD_BYTES)) + b"y")
    return encoded[: draw(st.integers(min_value=1, max_value=max(1, len(encoded) - 1)))]


@dataclass
class HostileFile:
    format: Format
    source: str
    lines: list[bytes]  # one record each, without newlines
    good: dict[int, str]  # line number (from 1) -> the id of an untouched record
    gzipped: bool = False
    as_array: bool = False

    def __repr__(self) -> str:  # short: hypothesis prints falsifying examples, and records are long
        bad = {number: line[:300] for number, line in enumerate(self.lines, start=1) if number not in self.good}
        container = ("gzipped " if self.gzipped else "") + ("array" if self.as_array else "lines")
        return f"HostileFile({self.format.name}, {container}, good lines {sorted(self.good)}, bad lines {bad})"

    def body(self) -> bytes:
        data = (b"[" + b",\n".join(self.lines) + b"]") if self.as_array else b"\n".join(self.lines) + b"\n"
        return gzip.compress(data) if self.gzipped else data


@st.composite
def hostile_files(
    draw: st.DrawFn, format_names: tuple[str, ...] = tuple(FORMATS), *, containers: bool = True, truncate: bool = True
) -> HostileFile:
    """A file of good and mutated real records in one format, JSONL or a JSON array, maybe gzipped.

    Lines are truncated only in JSON Lines (`truncate`): in an array or an envelope a broken item
    hides where the next one starts, so the body as a whole is refused.
    """
    fmt = FORMATS[draw(st.sampled_from(format_names))]
    source = f"fuzz-{uuid.uuid4().hex[:12]}"
    as_array = containers and draw(st.booleans())
    kinds = draw(st.lists(st.booleans(), min_size=2, max_size=6).filter(lambda k: any(k) and not all(k)))
    lines, good = [], {}
    for number, is_good in enumerate(kinds, start=1):
        record = fmt.with_id(draw(st.sampled_from(fmt.records())), f"{source}-{number}")
        if is_good:
            good[number] = f"{source}-{number}" if fmt.name != "openai-chat" else f"{source}-{number}:0"
            lines.append(json.dumps(record).encode())
        else:
            lines.append(draw(mutated_line(record, line_level=truncate and not as_array)))
    return HostileFile(fmt, source, lines, good, gzipped=containers and draw(st.booleans()), as_array=as_array)


# --- the invariants ---------------------------------------------------------------------------


def options_for(hostile: HostileFile) -> Any:
    from flywheel.ingest.parsers import FieldMapping
    from flywheel.ingest.services import IngestOptions

    mapping = FieldMapping.from_pairs(hostile.format.mapping)
    return IngestOptions(format=hostile.format.name, mapping=mapping, agent="fuzz", source=hostile.source)


def stored_ids(source: str) -> set[str]:
    from flywheel.ingest.models import Trajectory

    return set(Trajectory.objects.filter(source=source).values_list("external_id", flat=True))


def check_upload(hostile: HostileFile) -> list[str]:
    """The upload path (`stream_ingest`): every line accounted for, good ones stored, bad ones reported."""
    import io

    from flywheel.ingest.services import stream_ingest

    report = stream_ingest(stream=io.BytesIO(hostile.body()), options=options_for(hostile))
    problems = []
    if report.failure or report.read != len(hostile.lines):
        problems.append(f"read {report.read} of {len(hostile.lines)} lines (failure: {report.failure!r})")
    if report.stored + report.duplicates + report.rejected != report.read:
        problems.append(f"counts do not add up: {report.as_dict()}")
    problems += _reported_problems([(e["line"], e["reason"]) for e in report.errors], hostile, first=1)
    missing = set(hostile.good.values()) - stored_ids(hostile.source)
    if missing:
        problems.append(f"good records not stored: {sorted(missing)}")
    return problems


def _reported_problems(rejected: list[tuple[int, str]], hostile: HostileFile, *, first: int) -> list[str]:
    problems = []
    for line, reason in rejected:
        if line - first + 1 in hostile.good:
            problems.append(f"good line {line} rejected: {reason}")
        if not reason or reason.startswith(INTERNAL):
            problems.append(f"line {line}: {reason or 'no reason'}")
    return problems


def check_api(client: Any, token: str, hostile: HostileFile, *, envelope: bool) -> list[str]:
    """The API: one result per item, in order, good items stored, refused ones with their reason; never 500."""
    if envelope:
        body, content_type = b'{"batch": [' + b",\n".join(hostile.lines) + b"]}", "application/json"
    else:
        body, content_type = hostile.body(), "application/x-ndjson"
    query = f"format={hostile.format.name}&agent=fuzz&source={hostile.source}"
    query += "".join(f"&map={key}={value}" for key, value in hostile.format.mapping.items())
    response = client.post(f"/api/v1/trajectories?{query}", data=body, content_type=content_type,
                           HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    if response.status_code != 207:
        return [f"status {response.status_code}: {response.content[:300]!r}"]
    results = response.json()["results"]
    problems = []
    if [result["index"] for result in results] != list(range(len(hostile.lines))):
        problems.append(f"results are not one per item in order: {[r['index'] for r in results]}")
    rejected = [(r["index"], r.get("error", "")) for r in results if r["status"] == "rejected"]
    problems += _reported_problems(rejected, hostile, first=0)
    missing = set(hostile.good.values()) - stored_ids(hostile.source)
    if missing:
        problems.append(f"good records not stored: {sorted(missing)}")
    return problems


# --- OTLP ---------------------------------------------------------------------------------------


def sdk_export(turns: int = 2) -> dict[str, Any]:
    """GenAI spans of two traces, recorded by the OpenTelemetry SDK and encoded as OTLP/JSON (hex ids)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    resource = Resource.create({"service.name": "fuzz-bot"})
    provider = TracerProvider(resource=resource, id_generator=_UrandomIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("fuzz")
    for trace in range(2):
        with tracer.start_as_current_span("handle request"):
            for turn in range(turns):
                _record_turn(tracer, trace, turn)
    provider.shutdown()
    export = MessageToDict(encode_spans(exporter.get_finished_spans()))
    for resource_spans in export["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _base64_to_hex(span[key])
    return export


class _UrandomIds:
    """Trace and span ids from os.urandom: hypothesis seeds `random` (the SDK's default) per example,
    which would give every example the same trace ids."""

    def is_trace_id_random(self) -> bool:
        return True

    def generate_span_id(self) -> int:
        return int.from_bytes(os.urandom(8), "big") or 1

    def generate_trace_id(self) -> int:
        return int.from_bytes(os.urandom(16), "big") or 1


def _base64_to_hex(value: str) -> str:
    import base64

    return base64.b64decode(value).hex()


def _record_turn(tracer: Any, trace: int, turn: int) -> None:
    call = {
        "type": "tool_call",
        "id": f"call_{trace}_{turn}",
        "name": "get_order",
        "arguments": {"order_id": str(turn)},
    }
    user = [{"role": "user", "parts": [{"type": "text", "content": f"Where is order {turn}?"}]}]
    with tracer.start_as_current_span("chat gpt-4o") as chat:
        chat.set_attributes({
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.input.messages": json.dumps(user),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
            "gen_ai.usage.input_tokens": 40 + turn, "gen_ai.usage.output_tokens": 9,
        })  # fmt: skip
    with tracer.start_as_current_span("execute_tool get_order") as tool:
        tool.set_attributes({
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_order",
            "gen_ai.tool.call.id": call["id"], "gen_ai.tool.call.result": json.dumps({"status": "shipped"}),
        })  # fmt: skip


def spans_of(export: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for rs in export["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


@dataclass
class HostileExport:
    original: dict[str, Any]
    body: bytes
    content_type: str
    good_trace: str  # untouched, except by a protobuf byte flip (which may land anywhere)
    spoiled_trace: str

    def __repr__(self) -> str:  # short: the original export is long and the same shape every time
        return f"HostileExport({self.content_type}, spoiled {self.spoiled_trace}, body {self.body[:1500]!r})"


def openinference_export() -> dict[str, Any]:
    """The recorded export of openinference-instrumentation-openai (tests/fixtures/otlp), as two traces of
    fresh ids (hex): an agent span around two LLM spans, whose messages are flattened attributes."""
    recorded = json.loads((Path(__file__).parents[2] / "fixtures" / "otlp" / "openinference.json").read_text())
    export: dict[str, Any] = {"resourceSpans": []}
    for _ in range(2):
        copied = copy.deepcopy(recorded["traces"])
        trace_id, span_ids = os.urandom(16).hex(), {}
        for span in spans_of(copied):
            span_ids.setdefault(span["spanId"], os.urandom(8).hex())
        for span in spans_of(copied):
            span.update(traceId=trace_id, spanId=span_ids[span["spanId"]])
            if "parentSpanId" in span:
                span["parentSpanId"] = span_ids[span["parentSpanId"]]
        export["resourceSpans"] += copied["resourceSpans"]
    return export


@st.composite
def hostile_exports(draw: st.DrawFn, recorded: Callable[[], dict[str, Any]] = sdk_export) -> HostileExport:
    """An export of two traces with one span of the second spoiled (as JSON), or its protobuf bytes spoiled."""
    original = recorded()
    traces = sorted({span["traceId"] for span in spans_of(original)})
    good_trace, spoiled_trace = traces[0], traces[1]
    if draw(st.booleans()):
        from google.protobuf.json_format import ParseDict
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        data = bytearray(ParseDict(_with_base64_ids(original), ExportTraceServiceRequest()).SerializeToString())
        for _ in range(draw(st.integers(min_value=1, max_value=4))):
            data[draw(st.integers(min_value=0, max_value=len(data) - 1))] = draw(st.integers(0, 255))
        return HostileExport(original, bytes(data), "application/x-protobuf", good_trace, spoiled_trace)
    export = copy.deepcopy(original)
    victims = [span for span in spans_of(export) if span["traceId"] == spoiled_trace]
    victim = draw(st.sampled_from(victims))
    line = draw(mutated_line(victim, line_level=False))
    body = json.dumps(export).encode().replace(json.dumps(victim).encode(), line)
    return HostileExport(original, body, "application/json", good_trace, spoiled_trace)


def _with_base64_ids(export: dict[str, Any]) -> dict[str, Any]:
    import base64

    export = copy.deepcopy(export)
    for span in spans_of(export):
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key):
                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return export


def check_otlp(client: Any, token: str, hostile: HostileExport) -> list[str]:
    """Never a 500; 200 keeps the untouched trace, 400 keeps nothing; the spoiled trace recovers afterwards."""
    from flywheel.ingest.models import Trajectory

    def post(body: bytes, content_type: str) -> Any:
        return client.post("/v1/traces", data=body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")

    response = post(hostile.body, hostile.content_type)
    stored = set(Trajectory.objects.filter(source="otlp").values_list("external_id", flat=True))
    problems = []
    untouched = hostile.content_type == "application/json"
    if response.status_code == 200 and untouched and hostile.good_trace not in stored:
        problems.append("an untouched trace of an accepted export was not stored")
    elif response.status_code == 400 and hostile.good_trace in stored:
        problems.append("a refused export stored a trace")
    elif response.status_code not in (200, 400):
        problems.append(f"status {response.status_code}: {response.content[:300]!r}")
    again = post(json.dumps(hostile.original).encode(), "application/json")
    recovered = Trajectory.objects.filter(source="otlp", external_id=hostile.spoiled_trace).exists()
    if again.status_code != 200 or not recovered:
        problems.append(f"the spoiled trace froze: the good export then answered {again.status_code}")
    return problems


# --- running a property ----------------------------------------------------------------------


def run_property(strategy: Any, check: Callable[[Any], list[str]], *, examples: int, derandomize: bool,
                 on_problems: Callable[[Any, list[str]], None]) -> int:  # fmt: skip
    """Run `check` on `examples` generated examples; `on_problems` hears of every broken invariant."""
    ran = 0
    phases = [Phase.explicit, Phase.generate, Phase.shrink] if derandomize else [Phase.explicit, Phase.generate]

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None, phases=phases,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategy)
    def property_holds(example: Any) -> None:
        nonlocal ran
        ran += 1
        problems = check(example)
        if problems:
            on_problems(example, problems)

    property_holds()
    return ran
