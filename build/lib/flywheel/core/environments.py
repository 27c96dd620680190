"""Which environments jobs may run calls in: the trainer's own, and the team environments the operator lists.

A team's environment (a Python entry point, an MCP server command) runs its code on the workers,
so only those listed in `TRAINER_ENVIRONMENTS` are accepted, wherever one is named: an agent's
environment, a job's hyperparameters.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError

from trainer.environments import environment_names
from trainer.spec.environments import EXECUTING_ENVIRONMENTS


def allowed_environments() -> list[str]:
    return list(dict.fromkeys([*environment_names(), *EXECUTING_ENVIRONMENTS, *settings.TRAINER_ENVIRONMENTS]))


def allowed_environment(name: str) -> None:
    """A ValidationError unless `name` is one this installation allows."""
    if name and name not in allowed_environments():
        raise ValidationError(
            f"environment {name!r} is not one this installation allows (TRAINER_ENVIRONMENTS); "
            f"allowed: {', '.join(allowed_environments())}"
        )
