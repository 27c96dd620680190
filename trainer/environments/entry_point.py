"""A team's own environment, named by a Python entry point: `package.module:factory`.

The factory is called with the agent's safety policy as its one keyword (`factory(policy=...)`)
and returns a `trainer.environments.base.Environment`; TRL's `environment_factory` has the same
shape. Everything that can go wrong in finding and building it (no such module, no such
attribute, an import that raises, a factory that raises or returns something else) is an
EnvironmentUnavailable naming the entry point, raised before any episode starts.
"""

from __future__ import annotations

import importlib

from trainer.environments.base import Environment
from trainer.spec.environments import ENTRY_POINT
from trainer.verifiers.safety import SafetyPolicy


class EnvironmentUnavailable(ValueError):
    """The named environment cannot be built; the message says why."""


def is_entry_point(name: str) -> bool:
    return bool(ENTRY_POINT.match(name))


def load_environment(entry_point: str, policy: SafetyPolicy) -> Environment:
    """The environment `entry_point`'s factory builds for `policy`."""
    module_name, _, attribute = entry_point.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - an import of the team's code may raise anything; say what
        raise EnvironmentUnavailable(
            f"environment {entry_point}: cannot import {module_name}: {type(error).__name__}: {error}"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise EnvironmentUnavailable(f"environment {entry_point}: {module_name} has no {attribute}")
        target = getattr(target, part)
    if not callable(target):
        raise EnvironmentUnavailable(f"environment {entry_point}: {attribute} is not callable")
    try:
        built = target(policy=policy)
    except Exception as error:  # noqa: BLE001 - the factory is the team's code
        raise EnvironmentUnavailable(
            f"environment {entry_point}: its factory raised {type(error).__name__}: {error}"
        ) from None
    if not isinstance(built, Environment):
        raise EnvironmentUnavailable(
            f"environment {entry_point}: its factory returned a {type(built).__name__}, "
            "not a trainer.environments.base.Environment"
        )
    return built
