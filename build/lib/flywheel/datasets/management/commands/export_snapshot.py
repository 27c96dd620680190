"""`manage.py export_snapshot HASH --format native|trl|nemo-gym`: the snapshot as JSONL on stdout."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from flywheel.datasets.exports import EXPORT_FORMATS, snapshot_lines
from flywheel.datasets.models import TaskSetSnapshot


class Command(BaseCommand):
    help = "Write a snapshot's tasks as JSONL (native for trainer, trl, or nemo-gym)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("snapshot", help="Its content hash (a unique prefix will do) or id.")
        parser.add_argument("--format", default="native", choices=EXPORT_FORMATS)

    def handle(self, *args: Any, snapshot: str, format: str, **options: Any) -> None:
        matches = list(TaskSetSnapshot.objects.filter(content_hash__startswith=snapshot.lower())[:2])
        if not matches:
            matches = (
                [s for s in TaskSetSnapshot.objects.filter(id__startswith=snapshot)[:2]] if len(snapshot) >= 8 else []
            )
        if len(matches) != 1:
            raise CommandError(f"{snapshot!r} names {'no' if not matches else 'more than one'} snapshot")
        for line in snapshot_lines(matches[0], format):
            self.stdout.write(line)
