"""`manage.py snapshot_tasks --split heldout --name NAME [--sample N --stratify category --seed S]`."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from flywheel.core.models import Agent
from flywheel.datasets.models import Split
from flywheel.datasets.services import TaskRefused, snapshot_create


class Command(BaseCommand):
    help = "Freeze a split's tasks (or a stratified sample) into an immutable, content-hashed snapshot."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--split", required=True, choices=Split.values)
        parser.add_argument("--name", required=True)
        parser.add_argument("--agent", default="")
        parser.add_argument("--sample", type=int, default=None, help="Draw this many tasks.")
        parser.add_argument("--stratify", default="category", choices=["category", "bucket_id"])
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        agent = Agent.objects.filter(name=options["agent"]).first() if options["agent"] else None
        try:
            snapshot = snapshot_create(
                actor=None, name=options["name"], split=options["split"], agent=agent,
                sample_size=options["sample"], stratify_by=options["stratify"], seed=options["seed"],
            )  # fmt: skip
        except TaskRefused as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            json.dumps({"id": str(snapshot.id), "hash": snapshot.content_hash, "tasks": snapshot.task_count})
        )
