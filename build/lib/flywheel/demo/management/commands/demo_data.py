"""Load the demo's trajectories and tasks (skipping what is already there) and print what was done."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from flywheel.demo.services import demo_data_ensure


class Command(BaseCommand):
    help = "Ingest tau-bench's airline trajectories and import BFCL and WorkBench tasks for the demo."

    def handle(self, *args: Any, **options: Any) -> None:
        external = settings.SHARED_EXTERNAL_DIR
        if not external.is_dir():
            raise CommandError(f"no third-party data at {external} (set SHARED_EXTERNAL_DIR)")
        snapshots = demo_data_ensure(external=external, log=self.stdout.write)
        self.stdout.write(f"the loop trains on {snapshots.train} and holds out {snapshots.heldout}")
