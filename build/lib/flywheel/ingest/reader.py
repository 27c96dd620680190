"""Stream records out of an uploaded file: JSON Lines or a JSON array, either of them gzipped.

Memory stays bounded by the largest record, whatever the file size. Each record comes out as a
`RawRecord` holding either a JSON object or the reason it was refused, with the line it starts
on. A problem that makes the rest of the file unreadable (a gzip bomb past the cap, a broken
JSON array, a corrupt gzip stream) ends the iteration with `FileProblem`; the records before it
have been yielded. This module knows nothing of trajectories or of Django.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
ARRAY_CHUNK_CHARS = 1 << 20
# How much of a file starting with '[' is looked at to tell JSON Lines from a JSON array.
JSONL_SNIFF_BYTES = 1 << 13
# CPython refuses to turn longer digit strings into ints (sys.get_int_max_str_digits).
INT_DIGITS_LIMIT = 4300


@dataclass(frozen=True)
class ReadLimits:
    max_record_bytes: int = 16 << 20
    max_decompressed_bytes: int = 4 << 30
    max_depth: int = 64


@dataclass(frozen=True)
class RawRecord:
    line: int
    value: dict[str, Any] | None = None
    error: str | None = None
    size: int | None = None  # the record's length as read (bytes of its line, characters of an array item)


class FileProblem(Exception):
    """The rest of the file cannot be read; `line` is where reading stopped."""

    def __init__(self, reason: str, line: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


class _RejectedValue:
    def __init__(self, reason: str) -> None:
        self.reason = reason


_NON_FINITE = _RejectedValue("NaN and Infinity are not valid JSON")
OVERFLOW_REASON = "a number is too large for a float (it would be stored as Infinity)"
_HUGE_INT = _RejectedValue(f"an integer has more than {INT_DIGITS_LIMIT} digits")


def _parse_int(digits: str) -> int | _RejectedValue:
    return _HUGE_INT if len(digits.lstrip("-")) > INT_DIGITS_LIMIT else int(digits)


_DECODER = json.JSONDecoder(parse_constant=lambda _: _NON_FINITE, parse_int=_parse_int)


NUL_ESCAPE = "\\u0000"
NUL_REASON = "the record contains a NUL character (\\u0000), which PostgreSQL cannot store"
SURROGATE_REASON = "the record contains invalid UTF-8 or a lone surrogate (\\ud800-\\udfff)"
BAD_UTF8_REASON = "invalid UTF-8 in the record"
# A \\uD800-\\uDFFF escape may decode to a lone surrogate: only then are the strings walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\\ud800-\\udfff]")


def value_problem(value: Any, max_depth: int, *, check_strings: bool = False) -> str | None:
    """Why a decoded value must be refused (a rejected literal, too deep, not an object), or None."""
    if not isinstance(value, dict):
        kind = "array" if isinstance(value, list) else type(value).__name__
        return f"a JSON {kind}, not an object"
    return tree_problem(value, max_depth, check_strings=check_strings)


def tree_problem(value: Any, max_depth: int, *, check_strings: bool = False) -> str | None:
    """Why any decoded JSON value cannot be stored, or None.

    Refused: NaN and Infinity (also a number too large for a float), integers past the digit
    limit, nesting past `max_depth`, and, with `check_strings`, strings holding a NUL or a lone
    surrogate (PostgreSQL cannot store either). Walks without recursion, so depth costs no stack.
    """
    stack: list[tuple[Any, int]] = [([value], 0)]
    while stack:
        container, depth = stack.pop()
        if depth > max_depth:
            return f"nesting deeper than {max_depth} levels"
        if type(container) is dict:
            if check_strings and (problem := _strings_problem(container)):
                return problem
            children: Any = container.values()
        else:
            children = container
        for child in children:
            child_type = type(child)
            if child_type is dict or child_type is list:
                stack.append((child, depth + 1))
            elif child_type is float and not math.isfinite(child):
                return OVERFLOW_REASON
            elif child_type is _RejectedValue:
                return child.reason
            elif check_strings and child_type is str and (problem := _string_problem(child)):
                return problem
    return None


def _strings_problem(container: dict[Any, Any]) -> str | None:
    return next((problem for key in container if (problem := _string_problem(key))), None)


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return NUL_REASON
    # Most text is ASCII, which holds no surrogate: the check costs a scan in C, not a regex search.
    if not text.isascii() and _SURROGATE.search(text):
        return SURROGATE_REASON
    return None


def decode_object(text: str, max_depth: int) -> tuple[dict[str, Any] | None, str | None]:
    """One JSON object from text: (value, None) or (None, reason)."""
    if NUL_ESCAPE in text:
        return None, NUL_REASON
    return decode_object_allowing_nul(text, max_depth)


def decode_object_allowing_nul(text: str, max_depth: int) -> tuple[dict[str, Any] | None, str | None]:
    """As decode_object, for a container whose items are checked for NUL one by one."""
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return None, f"nesting deeper than {max_depth} levels"
    problem = value_problem(value, max_depth, check_strings=_SURROGATE_ESCAPE.search(text) is not None)
    return (None, problem) if problem else (value, None)


def decode_any(text: str) -> Any:
    """Any JSON value, NaN and over-long integers left in it as markers that `tree_problem` refuses.

    Raises json.JSONDecodeError or RecursionError as json.loads does.
    """
    return _DECODER.decode(text)


def decode_value(text: str, max_depth: int) -> tuple[Any, str | None]:
    """Any JSON value from text, refused (None, reason) when PostgreSQL's JSON could not store it."""
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return None, f"nesting deeper than {max_depth} levels"
    problem = tree_problem(value, max_depth, check_strings=True)
    return (None, problem) if problem else (value, None)


class _CappedReader(io.RawIOBase):
    """Reads a decompressing stream and stops with FileProblem once `cap` bytes came out."""

    def __init__(self, inner: IO[bytes], cap: int) -> None:
        self._inner, self._cap, self._count = inner, cap, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._count >= self._cap and self._inner.read(1):
            raise FileProblem(f"decompressed size exceeds the cap of {self._cap} bytes; decompression stopped")
        try:
            data = self._inner.read(min(len(buffer), self._cap - self._count))
        except (OSError, EOFError) as exc:
            raise FileProblem(f"the gzip stream is corrupt or truncated: {exc}") from exc
        self._count += len(data)
        buffer[: len(data)] = data
        return len(data)


class _Borrowed(io.RawIOBase):
    """Reads a stream the caller owns; closing this wrapper leaves the stream open."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def open_decompressed(stream: IO[bytes], limits: ReadLimits) -> io.BufferedReader:
    buffered: Any = io.BufferedReader(_Borrowed(stream))
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        gz = gzip.GzipFile(fileobj=buffered, mode="rb")
        return io.BufferedReader(_CappedReader(gz, limits.max_decompressed_bytes))  # type: ignore[arg-type]
    return buffered


def _skip_bom_and_space(stream: io.BufferedReader) -> bytes:
    """Consume a BOM and leading whitespace; the first significant byte, or b'' for an empty file."""
    if stream.peek(3)[:3] == UTF8_BOM:
        stream.read(3)
    while True:
        head = stream.peek(1)[:1]
        if head == b"" or not head.isspace():
            return head
        stream.read(1)


def read_array(stream: IO[bytes], limits: ReadLimits) -> Iterator[RawRecord]:
    """The items of a JSON array (not decompressed, first byte '['); raises FileProblem as read_records does."""
    data: Any = io.BufferedReader(_Borrowed(stream))
    if _skip_bom_and_space(data) != b"[":
        raise FileProblem("expected a JSON array", line=1)
    yield from _array_records(data, limits)


def read_records(stream: IO[bytes], limits: ReadLimits = ReadLimits()) -> Iterator[RawRecord]:
    """Every record of the file in order; raises FileProblem when the rest cannot be read."""
    data = open_decompressed(stream, limits)
    first = _skip_bom_and_space(data)
    if first == b"":
        raise FileProblem("the file is empty", line=0)
    if first == b"[":
        if _is_json_lines(data.peek(JSONL_SNIFF_BYTES)):
            yield from _jsonl_records(data, limits)
        else:
            yield from _array_records(data, limits)
    else:
        yield from _jsonl_records(data, limits)


def _is_json_lines(head: bytes) -> bool:
    """JSON Lines whose first line is an array (refused alone), not a JSON array file: told from the
    buffered start of the file, a first line that is a whole JSON value with more text after it."""
    line, newline, rest = head.partition(b"\n")
    if not newline or not rest.strip():
        return False
    try:
        _DECODER.decode(line.decode("utf-8", errors="surrogateescape"))
    except (ValueError, RecursionError):
        return False
    return True


def _read_line(data: io.BufferedReader, limit: int) -> tuple[bytes, bool]:
    """The next line (without its newline) and whether it fit; an over-long line is consumed whole."""
    line = data.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line, True
    while True:
        rest = data.readline(1 << 20)
        if not rest or rest.endswith(b"\n"):
            return b"", False


def _jsonl_records(data: io.BufferedReader, limits: ReadLimits) -> Iterator[RawRecord]:
    number = 0
    while True:
        raw, fits = _read_line(data, limits.max_record_bytes)
        number += 1
        if not fits:
            yield RawRecord(number, error=f"the record is larger than {limits.max_record_bytes} bytes")
            continue
        if raw == b"":
            return
        if not raw.strip():
            continue
        yield _jsonl_record(raw, number, limits)


def _jsonl_record(raw: bytes, number: int, limits: ReadLimits) -> RawRecord:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return RawRecord(number, error=f"invalid UTF-8 at byte {exc.start + 1} of the line")
    value, problem = decode_object(text, limits.max_depth)
    if problem and not raw.endswith(b"\n") and problem.startswith("not valid JSON"):
        problem = f"the file ends mid-record (truncated last line): {problem}"
    return RawRecord(number, value=value, error=problem, size=len(raw))


class _ArrayCursor:
    """A growing text window over a JSON array, with the line number of its read position."""

    def __init__(self, data: io.BufferedReader, limits: ReadLimits) -> None:
        self._data, self._limits = data, limits
        # Bad bytes become lone surrogates, so only the item holding them is refused.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.text, self.pos, self.line, self.eof = "", 0, 1, False

    def more(self, chars: int = ARRAY_CHUNK_CHARS) -> bool:
        if self.eof:
            return False
        chunk = self._data.read(chars)
        decoded = self._decoder.decode(chunk, final=not chunk)
        self.eof = not chunk
        self.text = self.text[self.pos :] + decoded
        self.pos = 0
        return bool(chunk)

    def advance(self, to: int) -> None:
        self.line += self.text.count("\n", self.pos, to)
        self.pos = to

    def next_significant(self) -> str:
        while True:
            while self.pos < len(self.text) and self.text[self.pos].isspace():
                self.advance(self.pos + 1)
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""


def _array_records(data: io.BufferedReader, limits: ReadLimits) -> Iterator[RawRecord]:
    cursor = _ArrayCursor(data, limits)
    cursor.more()
    cursor.advance(1)  # the opening bracket
    expect_value = True
    while True:
        head = cursor.next_significant()
        if head == "]":
            cursor.advance(cursor.pos + 1)
            if cursor.next_significant() != "":
                raise FileProblem("unexpected text after the end of the JSON array", cursor.line)
            return
        if head == "":
            raise FileProblem("the file ends inside the JSON array (truncated)", cursor.line)
        if not expect_value:
            if head != ",":
                raise FileProblem(f"expected ',' or ']' between array items, found {head!r}", cursor.line)
            cursor.advance(cursor.pos + 1)
            cursor.next_significant()
        yield _array_item(cursor, limits)
        expect_value = False


def _array_item(cursor: _ArrayCursor, limits: ReadLimits) -> RawRecord:
    line = cursor.line
    while True:
        try:
            value, end = _DECODER.raw_decode(cursor.text, cursor.pos)
            break
        except json.JSONDecodeError as exc:
            _read_more(cursor, limits, line, f"not valid JSON: {exc.msg} (the array cannot be read past it)")
        except RecursionError:
            # Too deep for the decoder: find where the item ends without recursing, and refuse it alone.
            end_of_item = _container_end(cursor.text, cursor.pos)
            if end_of_item is not None:
                cursor.advance(end_of_item)
                return RawRecord(line, error=f"nesting deeper than {limits.max_depth} levels")
            _read_more(cursor, limits, line, "the file ends inside a deeply nested item (truncated)")
    problem = _item_problem(cursor.text[cursor.pos : end], value, limits.max_depth)
    size = end - cursor.pos
    cursor.advance(end)
    return RawRecord(line, value=None if problem else value, error=problem, size=size)


def _read_more(cursor: _ArrayCursor, limits: ReadLimits, line: int, reason_at_end: str) -> None:
    if len(cursor.text) - cursor.pos > limits.max_record_bytes:
        raise FileProblem(f"the item is larger than {limits.max_record_bytes} bytes", line)
    if not cursor.more(max(ARRAY_CHUNK_CHARS, len(cursor.text))):
        raise FileProblem(reason_at_end, line)


# A string (one still open at the end of the text runs to it), or a bracket outside strings.
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[\[\]{}]')


def _container_end(text: str, start: int) -> int | None:
    """Where the array or object opening at `start` closes (the index after it); None when not in `text`."""
    depth = 0
    for token in _STRUCTURE.finditer(text, start):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
        elif mark in ("]", "}"):
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def _item_problem(text: str, value: Any, max_depth: int) -> str | None:
    if NUL_ESCAPE in text:
        return NUL_REASON
    if _SURROGATE.search(text):
        return BAD_UTF8_REASON  # a raw surrogate in the text: undecodable bytes, kept by surrogateescape
    return value_problem(value, max_depth, check_strings=_SURROGATE_ESCAPE.search(text) is not None)
