"""Where episodes run: the environments a job may name, and how long an episode may go on.

A job's `environment` executes its calls against a state: a built-in one, a team's own Python
entry point (`package.module:factory`, built by trainer.environments.entry_point), or an MCP
server over stdio (`mcp:<command>`, trainer.environments.mcp). Checked here, without building
anything, because the app checks a job's settings before queueing it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Environments that execute calls against a state (replay's is a recording); single_step only re-verifies.
EXECUTING_ENVIRONMENTS = ("workbench", "replay")
# A team's own environment: `package.module:factory` (trainer.environments.entry_point builds it), or
# `mcp:<command>`, an MCP server over stdio (trainer.environments.mcp).
ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
MCP_PREFIX = "mcp:"


def check_executing_environment(name: str | None) -> None:
    """A ValueError unless `name` is null, a built-in executing environment, an entry point or an MCP command."""
    if name is None or name in EXECUTING_ENVIRONMENTS or ENTRY_POINT.match(name):
        return
    if name.startswith(MCP_PREFIX) and name[len(MCP_PREFIX) :].strip():
        return
    raise ValueError(f"environment must be one of {', '.join(EXECUTING_ENVIRONMENTS)}, a Python entry point "
                     "'package.module:factory', an MCP server 'mcp:<command>', or null")


@dataclass(frozen=True)
class EpisodeBudget:
    """How long an episode may run (`trainer.episodes`): model turns, and tokens generated over all of them."""

    max_turns: int = 8
    max_tokens: int = 2048

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_tokens < 1:
            raise ValueError("an episode needs at least one turn and one token")
