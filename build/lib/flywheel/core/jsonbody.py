"""Read untrusted JSON (request bodies, form fields) without ever failing with a 500.

`body_read` reads a request body with a size cap (a Content-Length that is not a number is a 400,
not a crash); `json_parse` turns text into a JSON value; `json_object_from_body` does both for the
many endpoints that take one JSON object. Every problem is a `JsonInputError` that carries the HTTP
status to answer and a message for the sender: invalid JSON or UTF-8, NaN and Infinity, integers
too long to convert, nesting deeper than the limit (never a RecursionError), and text PostgreSQL
cannot store (NUL, lone surrogates). Ingestion files are read by `flywheel.ingest.reader` instead,
record by record.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.http import HttpRequest

MAX_DEPTH = 64
CHUNK_BYTES = 1 << 16


class JsonInputError(ValueError):
    """The input cannot be used; `status` is 400 or 413, `message` says why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def content_length(request: HttpRequest) -> int | None:
    """The declared body size; None when absent. A value that is not a whole number is refused."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if not declared.strip():
        return None
    if not declared.strip().isascii() or not declared.strip().isdigit():
        raise JsonInputError(f"the Content-Length header {declared[:40]!r} is not a whole number")
    return int(declared)


def body_read(request: HttpRequest, *, max_bytes: int) -> bytes:
    """The request body, read as a stream and stopped past `max_bytes` (413)."""
    declared = content_length(request)
    if declared is not None and declared > max_bytes:
        raise JsonInputError(f"the body is larger than {max_bytes} bytes", status=413)
    chunks, size = [], 0
    while chunk := request.read(min(CHUNK_BYTES, max_bytes + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise JsonInputError(f"the body is larger than {max_bytes} bytes", status=413)
    return b"".join(chunks)


def _refuse_constant(name: str) -> Any:
    raise JsonInputError(f"{name} is not valid JSON")


def _decoder_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonInputError(f"the number {text[:40]} is too large")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_decoder_float)


def json_parse(text: str | bytes, *, what: str = "the body", max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in `text`; JsonInputError (400) naming what is wrong with it."""
    try:
        decoded = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError as exc:
        raise JsonInputError(f"{what} is not valid UTF-8 (byte {exc.start + 1})") from None
    try:
        value = _DECODER.decode(decoded)
    except RecursionError:
        raise JsonInputError(f"{what} nests deeper than {max_depth} levels") from None
    except JsonInputError as exc:
        raise JsonInputError(f"{what}: {exc.message}") from None
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        raise JsonInputError(f"{what} is not valid JSON: {exc}") from None
    problem = _tree_problem(value, max_depth)
    if problem:
        raise JsonInputError(f"{what} {problem}")
    return value


def _tree_problem(value: Any, max_depth: int) -> str | None:
    """Too deep, or a string PostgreSQL cannot store; walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= max_depth:
                return f"nests deeper than {max_depth} levels"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, str) and _bad_text(item):
            return "holds a NUL character or invalid Unicode (a lone surrogate)"
    return None


def _bad_text(text: str) -> bool:
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def json_object_from_body(request: HttpRequest, *, max_bytes: int) -> dict[str, Any]:
    """The body as one JSON object (an empty body is {}); JsonInputError otherwise."""
    body = body_read(request, max_bytes=max_bytes)
    value = json_parse(body) if body.strip() else {}
    if not isinstance(value, dict):
        raise JsonInputError(f"the body must be a JSON object, not a JSON {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
