"""Create an API token for a user from the command line; prints the secret once."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from flywheel.core.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token (Authorization: Bearer <token>) for USERNAME."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="What the token is for.")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        _, secret = api_token_create(user=user, name=name)
        self.stdout.write(secret)
