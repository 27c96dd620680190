"""Create an API token for a user from the command line; prints the secret once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from flywheel.core.models import ApiToken
from flywheel.core.services import ALL_SCOPES, api_token_create


class Command(BaseCommand):
    help = "Create an API token (Authorization: Bearer <token>) for USERNAME."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="What the token is for.")
        parser.add_argument("--scope", action="append", choices=ApiToken.Scope.values, dest="scopes",
                            help="What the token may do; repeat for several (default: all of them).")  # fmt: skip
        parser.add_argument("--expires-in-days", type=int, default=None, help="Default: the token never expires.")

    def handle(self, *args: Any, username: str, name: str, scopes: list[str] | None, expires_in_days: int | None,
               **options: Any) -> None:  # fmt: skip
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if expires_in_days is not None and expires_in_days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        _, secret = api_token_create(user=user, name=name, scopes=scopes or ALL_SCOPES, expires_at=expires_at)
        self.stdout.write(secret)
