"""`manage.py ingest PATH`: the same ingestion path as uploads, from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from flywheel.ingest.parsers import FORMAT_CHOICES
from flywheel.ingest.services import IngestOptions, ingest_options_validate, redactor_build, stream_ingest


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise CommandError(f"--map takes KEY=FIELD, got {text!r}")
    return key, value


class Command(BaseCommand):
    help = "Ingest trajectories from a JSONL or JSON array file (optionally .gz); prints a JSON summary last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--format", default="auto", choices=FORMAT_CHOICES)
        parser.add_argument("--agent", default="", help="Agent for records that name none (default: 'default').")
        parser.add_argument("--source", default="", help="Namespace of record ids for dedup (default: the agent).")
        parser.add_argument(
            "--map",
            nargs="+",
            default=[],
            metavar="KEY=FIELD",
            help="Where records keep messages, id (a,b joins fields), outcome, metadata, agent, model_version.",
        )
        parser.add_argument("--redact", default="", help="Built-in patterns to redact: email,api_key,phone.")
        parser.add_argument("--redact-pattern", action="append", default=[], help="A custom regex to redact.")

    def handle(self, *args: Any, path: Path, format: str, agent: str, source: str, map: list[str], **opts: Any) -> None:
        try:
            mapping = ingest_options_validate(
                format=format, mapping=dict(_pair(item) for item in map), agent_name=agent, source=source
            )
            patterns = [name.strip() for name in opts["redact"].split(",") if name.strip()]
            redactor = redactor_build(patterns=patterns, custom=opts["redact_pattern"])
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        if not path.is_file():
            raise CommandError(f"{path} is not a file")
        options = IngestOptions(format=format, mapping=mapping, agent=agent, source=source, redactor=redactor)
        with path.open("rb") as stream:
            report = stream_ingest(stream=stream, options=options)
        self.stdout.write(json.dumps(report.as_dict()))
