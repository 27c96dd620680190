"""Hostile input (wrong types and shapes, numbers and text PostgreSQL cannot hold) is refused line by line.

The issue's table, reproduced: one wrongly typed line in a file, in an API batch, in the command.
Nothing escapes a parser; the bad line is reported with its number and every other line is stored.
"""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.core.management import call_command

from flywheel.ingest import services
from flywheel.ingest.models import Trajectory
from flywheel.ingest.parsers import FieldMapping, RecordError, parse_record
from flywheel.ingest.reader import ReadLimits, read_records
from flywheel.ingest.services import IngestOptions, stream_ingest

CHAT = IngestOptions(format="openai-chat", agent="support")


def chat_line(number: int, **message_changes: object) -> bytes:
    message = {"role": "user", "content": f"where is order {number}?", **message_changes}
    record = {"id": f"conv-{number}", "outcome": "success", "messages": [message]}
    return json.dumps(record).encode() + b"\n"


@pytest.mark.django_db
@pytest.mark.slow
def test_one_wrongly_typed_line_in_2401_is_rejected_with_its_number_and_the_other_2400_are_stored():
    lines = [chat_line(number) for number in range(1, 2402)]
    lines[1200] = chat_line(1201, role=[])
    report = stream_ingest(stream=io.BytesIO(b"".join(lines)), options=CHAT).as_dict()
    assert (report["read"], report["stored"], report["rejected"]) == (2401, 2400, 1)
    assert report["errors"] == [
        {"line": 1201, "reason": "message 0 has role []; expected system, user, assistant or tool"}
    ]
    stored = set(Trajectory.objects.values_list("external_id", flat=True))
    assert stored == {f"conv-{number}" for number in range(1, 2402)} - {"conv-1201"}


@pytest.mark.django_db
def test_the_ingest_command_reports_a_wrongly_typed_line_instead_of_dying(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_bytes(chat_line(1) + chat_line(2, content=[{"type": "text", "text": 1}]) + chat_line(3))
    out = io.StringIO()
    call_command("ingest", str(path), "--format", "openai-chat", stdout=out)
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert (summary["stored"], summary["rejected"]) == (2, 1)
    assert summary["errors"][0]["line"] == 2 and "text that is a int" in summary["errors"][0]["reason"]


MESSAGE = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"messages": [{"role": []}]}, "has role []"),
        ({"messages": [{"role": {"a": 1}, "content": "x"}]}, "has role {'a': 1}"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "text that is a int"),
        ({"messages": [{"role": "user", "content": [7]}]}, "part 0 of the content of message 0 is a int"),
        ({"messages": [{"role": "assistant", "tool_calls": [{**CALL, "id": ["x"]}]}]}, "tool call id"),
        ({"messages": [MESSAGE, {"role": "tool", "tool_call_id": {}, "content": "x"}]}, "tool_call_id of message 1"),
        ({"messages": [MESSAGE, {"role": "tool", "name": 5, "content": "x"}]}, "name of message 1 must be a string"),
        ({"responses_create_params": {"input": [{"type": "message", "role": ["user"]}]}}, "item 0 is a message"),
        ({"response": {"output": [{"type": "function_call", "name": "f", "call_id": [1]}]}}, "call id of item 0"),
        ({"response": {"output": [{"type": "reasoning", "summary": [{"text": {"x": 1}}]}]}}, "summary of item 0"),
        ({"steps": [{"kind": "user", "text": "x"}], "duration_ms": 10**12}, "duration_ms must be between"),
        ({"steps": [{"kind": "user", "text": "x"}], "cost": 10**400}, "cost is too large a number"),
        ({"steps": [{"kind": "user", "text": "x", "latency_ms": float("inf")}]}, "latency_ms must be a finite"),
        ({"steps": [{"kind": "user", "text": "x", "tokens": {"input": 2**31}}]}, "input must be between"),
    ],
)
def test_a_wrongly_typed_field_is_a_record_error_that_names_it(record, reason):
    with pytest.raises(RecordError) as refused:
        parse_record(record, "auto", FieldMapping())
    assert reason in str(refused.value)


def test_arguments_that_postgresql_json_cannot_hold_are_kept_as_raw_text():
    arguments = '{"a": NaN, "b": "\\ud800"}'
    record = {
        "messages": [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": arguments}}]}]
    }
    step = parse_record(record, "openai-chat", FieldMapping()).steps[0]
    assert (step.tool_arguments, step.tool_arguments_raw) == (None, arguments)


@pytest.mark.django_db
def test_a_parser_bug_costs_only_its_line_and_is_logged(monkeypatch, caplog):
    real_parse = services.parse_record

    def parse_or_fail(record, format_name, mapping):
        if record.get("id") == "conv-2":
            raise KeyError("surprise")
        return real_parse(record, format_name, mapping)

    monkeypatch.setattr(services, "parse_record", parse_or_fail)
    with caplog.at_level(logging.ERROR, logger="flywheel.ingest.services"):
        report = stream_ingest(stream=io.BytesIO(chat_line(1) + chat_line(2) + chat_line(3)), options=CHAT).as_dict()
    assert (report["stored"], report["rejected"]) == (2, 1)
    assert report["errors"][0]["line"] == 2 and "KeyError" in report["errors"][0]["reason"]
    assert any(record.exc_info and record.exc_info[0] is KeyError for record in caplog.records)


def read(data: bytes) -> list[tuple[int, str | None]]:
    return [(record.line, record.error) for record in read_records(io.BytesIO(data), ReadLimits())]


def test_a_number_too_large_for_a_float_is_refused_like_infinity():
    assert read(b'{"a": 1}\n{"cost": 1e400}\n{"b": 2}\n') == [
        (1, None),
        (2, "a number is too large for a float (it would be stored as Infinity)"),
        (3, None),
    ]


def test_a_lone_surrogate_escape_is_refused_and_a_real_pair_is_kept():
    lines = read(b'{"a": "\\ud800"}\n{"\\udfff": 1}\n{"a": "\\ud83d\\ude00"}\n')
    assert [error is not None and "lone surrogate" in error for _, error in lines] == [True, True, False]


def test_bad_utf8_inside_one_array_item_refuses_that_item_only():
    data = b'[{"a": 1},\n{"b": "\xff\xfe"},\n{"c": 3}]'
    assert read(data) == [(1, None), (2, "invalid UTF-8 in the record"), (3, None)]


def test_json_lines_whose_first_line_is_an_array_are_read_as_json_lines():
    assert read(b'[1, 2]\n{"a": 1}\n') == [(1, "a JSON array, not an object"), (2, None)]
    assert read(b'[{"a": 1}, {"b": 2}]\n') == [(1, None), (1, None)]  # a one-line array file stays an array
