"""Run the flywheel's loop on the demo data: baseline, SFT, GRPO, gate, promotion (needs a worker)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from flywheel.core.services import demo_users_ensure
from flywheel.demo.services import DemoFailed, demo_data_ensure, demo_loop, demo_people


class Command(BaseCommand):
    help = (
        "Run the loop on the demo data as jobs on the worker (make demo starts one): a baseline evaluation, "
        "SFT, GRPO, a gate, and promotion when the gate passes. A second run reuses finished steps."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            demo_users_ensure(logins_file=settings.DEMO_LOGINS_FILE)
        except ValidationError as exc:
            raise CommandError(exc.messages[0]) from exc
        snapshots = demo_data_ensure(external=settings.SHARED_EXTERNAL_DIR, log=self.stdout.write)
        try:
            gate = demo_loop(snapshots=snapshots, people=demo_people(), log=self.stdout.write)
        except DemoFailed as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"gate {gate.get_status_display().lower()}: {gate.decision.get('summary', '')}")
