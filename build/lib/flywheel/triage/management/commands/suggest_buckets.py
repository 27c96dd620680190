"""`manage.py suggest_buckets [--all]`: compute bucket suggestions for trajectories.

Without --all only trajectories that never had suggestions computed (ingested before triage
existed, or while the broker was down); with --all every trajectory, e.g. after an agent's tool
catalogue or safety policy changed.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from flywheel.triage.services import suggestions_recompute


class Command(BaseCommand):
    help = "Compute failure-bucket suggestions for trajectories not yet suggested for (--all: every one)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--all", action="store_true", help="Recompute for every trajectory.")

    def handle(self, *args: Any, **options: Any) -> None:
        count = suggestions_recompute(actor=None, everything=options["all"])
        self.stdout.write(f"suggestions computed for {count} trajectories")
