"""The container reader: JSONL, JSON arrays and gzip, with every kind of hostile input."""

from __future__ import annotations

import gzip
import io

import pytest

from flywheel.ingest.reader import FileProblem, ReadLimits, read_records


def read(data: bytes, **limits: int) -> list[tuple[int, object, str | None]]:
    return [(r.line, r.value, r.error) for r in read_records(io.BytesIO(data), ReadLimits(**limits))]


def errors(data: bytes, **limits: int) -> dict[int, str]:
    return {line: error for line, _, error in read(data, **limits) if error}


def test_it_reads_json_lines_and_skips_blank_lines():
    assert read(b'{"a": 1}\n\n{"b": 2}\n') == [(1, {"a": 1}, None), (3, {"b": 2}, None)]


def test_it_accepts_a_byte_order_mark():
    assert read(b'\xef\xbb\xbf{"a": 1}\n') == [(1, {"a": 1}, None)]


def test_it_rejects_a_line_with_invalid_utf8_and_keeps_the_others():
    result = read(b'{"a": 1}\n{"b": "\xff"}\n{"c": 3}\n')
    assert [value for _, value, _ in result] == [{"a": 1}, None, {"c": 3}]
    assert result[1][2] == "invalid UTF-8 at byte 8 of the line"


def test_it_rejects_a_line_that_is_not_json():
    assert errors(b'{"a": 1}\nhello\n') == {2: "not valid JSON: Expecting value at column 1"}


@pytest.mark.parametrize(("line", "kind"), [(b"[1, 2]", "array"), (b'"text"', "str"), (b"42", "int")])
def test_it_rejects_a_json_value_that_is_not_an_object(line, kind):
    assert errors(b'{"a": 1}\n' + line + b"\n") == {2: f"a JSON {kind}, not an object"}


def test_it_names_a_truncated_last_line():
    assert errors(b'{"a": 1}\n{"b": [1, 2')[2].startswith("the file ends mid-record (truncated last line)")


def test_it_rejects_nesting_deeper_than_the_limit():
    deep = b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}\n"
    very_deep = b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
    assert errors(deep + very_deep + b'{"ok": 1}\n') == {
        1: "nesting deeper than 64 levels",
        2: "nesting deeper than 64 levels",
    }


def test_it_rejects_integers_over_the_digit_limit():
    assert errors(b'{"n": ' + b"9" * 5000 + b"}\n") == {1: "an integer has more than 4300 digits"}


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_it_rejects_nan_and_infinity(literal):
    assert errors(b'{"x": ' + literal + b"}\n") == {1: "NaN and Infinity are not valid JSON"}


def test_it_rejects_a_record_over_the_size_limit_and_reads_on():
    result = read(b'{"a": "' + b"x" * 5000 + b'"}\n{"b": 1}\n', max_record_bytes=1024)
    assert result == [(1, None, "the record is larger than 1024 bytes"), (2, {"b": 1}, None)]


@pytest.mark.parametrize("data", [b"", b"  \n\n", b"\xef\xbb\xbf"])
def test_an_empty_file_is_a_file_problem(data):
    with pytest.raises(FileProblem, match="the file is empty"):
        read(data)


def test_it_streams_a_json_array_with_line_numbers():
    data = b'[\n  {"a": 1},\n  {"b":\n    2},\n  7, {"c": NaN}\n]\n'
    assert read(data) == [
        (2, {"a": 1}, None),
        (3, {"b": 2}, None),
        (5, None, "a JSON int, not an object"),
        (5, None, "NaN and Infinity are not valid JSON"),
    ]


def test_an_array_item_can_span_many_read_chunks():
    big = b'{"text": "' + b"y" * 3_000_000 + b'"}'
    result = read(b"[" + big + b', {"b": 1}]')
    assert len(result[0][1]["text"]) == 3_000_000 and result[1][1] == {"b": 1}


def test_a_truncated_array_keeps_the_items_before_the_break():
    records = read_records(io.BytesIO(b'[{"a": 1}, {"b": 2}, {"c": '))
    assert next(records).value == {"a": 1}
    assert next(records).value == {"b": 2}
    with pytest.raises(FileProblem, match="not valid JSON"):
        next(records)


def test_it_reads_gzipped_json_lines_and_arrays():
    assert read(gzip.compress(b'{"a": 1}\n{"b": 2}\n')) == [(1, {"a": 1}, None), (2, {"b": 2}, None)]
    assert read(gzip.compress(b'[{"a": 1}]')) == [(1, {"a": 1}, None)]


def test_gzip_decompression_stops_at_the_cap():
    records = read_records(
        io.BytesIO(gzip.compress(b'{"a": 1}\n' * 100_000)), ReadLimits(max_decompressed_bytes=20_000)
    )
    kept = []
    with pytest.raises(FileProblem, match="decompressed size exceeds the cap of 20000 bytes"):
        for record in records:
            kept.append(record)
    assert 2000 <= len(kept) <= 2223


def test_a_corrupt_gzip_stream_is_a_file_problem():
    with pytest.raises(FileProblem, match="gzip stream is corrupt or truncated"):
        read(gzip.compress(b'{"a": 1}\n' * 100)[:-12])


def test_it_rejects_a_nul_character_that_postgresql_cannot_store():
    assert errors(b'{"a": "x\\u0000y"}\n{"b": 1}\n') == {
        1: "the record contains a NUL character (\\u0000), which PostgreSQL cannot store"
    }
    assert [error for _, _, error in read(b'[{"a": "\\u0000"}, {"b": 1}]')] == [
        "the record contains a NUL character (\\u0000), which PostgreSQL cannot store",
        None,
    ]
