"""Input formats: each module turns one JSON record into a `ParsedTrajectory` or raises `RecordError`.

A parser module exposes `NAME`, `detect(record, mapping) -> bool` and `parse(record, mapping)`.
`parse_record` picks the parser by name, or by detection when the format is `auto`, and refuses
what the columns could not hold. A record of any JSON shape gets a `ParsedTrajectory` or a
`RecordError`; any other exception is a parser bug. Parsers are pure Python: they never touch the
database.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from flywheel.ingest.parsers import native, openai_chat, otlp, responses
from flywheel.ingest.parsers.base import FieldMapping, ParsedStep, ParsedTrajectory, RecordError, storable_problem

# The formats people upload and post; `otlp` records are assembled by the OTLP endpoint itself.
PARSERS: dict[str, ModuleType] = {module.NAME: module for module in (native, openai_chat, responses)}
BY_NAME: dict[str, ModuleType] = {**PARSERS, otlp.NAME: otlp}
AUTO = "auto"
FORMAT_CHOICES = [AUTO, *PARSERS]

__all__ = ["FORMAT_CHOICES", "PARSERS", "FieldMapping", "ParsedStep", "ParsedTrajectory", "RecordError", "parse_record"]


def parse_record(record: dict[str, Any], format_name: str, mapping: FieldMapping) -> ParsedTrajectory:
    parsed = _parser_for(record, format_name, mapping).parse(record, mapping)
    problem = storable_problem(parsed)
    if problem:
        raise RecordError(problem)
    return parsed


def _parser_for(record: dict[str, Any], format_name: str, mapping: FieldMapping) -> ModuleType:
    if format_name != AUTO:
        return BY_NAME[format_name]
    for parser in PARSERS.values():
        if parser.detect(record, mapping):
            return parser
    raise RecordError(f"cannot tell the format: no 'steps' list ({native.NAME}) and no '{mapping.messages}' list")
