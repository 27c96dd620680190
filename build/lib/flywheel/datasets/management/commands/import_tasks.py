"""`manage.py import_tasks PATH --format ... --split ...`: load a benchmark's tasks into a split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from flywheel.core.models import Agent
from flywheel.datasets.importers import FORMATS, ImportFileError, read
from flywheel.datasets.models import Split
from flywheel.datasets.services import tasks_import


class Command(BaseCommand):
    help = "Import regression tasks (BFCL, WorkBench, NeMo Gym or native JSONL); prints a JSON summary last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--format", required=True, choices=FORMATS)
        parser.add_argument("--split", required=True, choices=Split.values)
        parser.add_argument("--agent", default="", help="The agent the tasks belong to (must exist).")

    def handle(self, *args: Any, path: Path, format: str, split: str, agent: str, **options: Any) -> None:
        owner = None
        if agent:
            owner = Agent.objects.filter(name=agent).first()
            if owner is None:
                raise CommandError(f"no agent named {agent!r}")
        try:
            candidates = read(path, format)
            report = tasks_import(actor=None, candidates=candidates, split=split, agent=owner, source_ref=path.name)
        except ImportFileError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(report.as_dict()))
