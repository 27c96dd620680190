"""Create one demo user per role and print their logins (never in production)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from flywheel.core.services import demo_users_ensure


class Command(BaseCommand):
    help = "Create (or refresh) the demo users, one per role, and print their passwords."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            logins = demo_users_ensure(logins_file=settings.DEMO_LOGINS_FILE)
        except ValidationError as exc:
            raise CommandError(exc.messages[0]) from exc
        for username, password in logins.items():
            self.stdout.write(f"  {username:<16} {password}")
