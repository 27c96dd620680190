"""Send a ping to each queue and report which worker answered, or that none did."""

from __future__ import annotations

import json
from typing import Any

from celery.exceptions import TimeoutError as CeleryTimeout
from django.core.management.base import BaseCommand, CommandError, CommandParser

from flywheel.core.tasks import gpu_ping, ping


class Command(BaseCommand):
    help = "Check that a worker answers on each Celery queue (default and gpu)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=10.0, help="Seconds to wait per queue.")

    def handle(self, *args: Any, timeout: float, **options: Any) -> None:
        results: dict[str, Any] = {}
        for queue, task in (("default", ping), ("gpu", gpu_ping)):
            try:
                results[queue] = task.delay().get(timeout=timeout)
            except CeleryTimeout:
                results[queue] = None
        self.stdout.write(json.dumps(results))
        silent = [queue for queue, answer in results.items() if answer is None]
        if silent:
            raise CommandError(f"no worker answered on: {', '.join(silent)}")
