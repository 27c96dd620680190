"""Environments by name: each runs episodes of tasks and judges them.

- `single_step`: one assistant turn, judged by the task's verifier (nothing is executed).
- `workbench`: the multi-step workplace sandbox over WorkBench's tables, judged by its end state.
- `replay`: a production trajectory's recorded tool results, judged by its ground-truth calls.
- `package.module:factory`: a team's own environment (`trainer.environments.entry_point`).
- `mcp:<command>`: a team's tools served by an MCP server over stdio (`trainer.environments.mcp`).

The contract is `trainer.environments.base.Environment`; `trainer.environments.batch` runs a
file of outputs through one (`python -m trainer verify --env ...`). No torch, no Django.
"""

from __future__ import annotations

from trainer.environments.base import Environment, Judgement, StepResult
from trainer.environments.entry_point import EnvironmentUnavailable, is_entry_point, load_environment
from trainer.environments.mcp import McpEnvironment, is_mcp, server_command
from trainer.environments.replay import ReplayEnvironment
from trainer.environments.single_step import SingleStepEnvironment
from trainer.environments.workbench import WorkbenchEnvironment
from trainer.verifiers import DEFAULT_VERIFIER, get_verifier
from trainer.verifiers.safety import SafetyPolicy

ENVIRONMENTS = (SingleStepEnvironment.name, WorkbenchEnvironment.name, ReplayEnvironment.name)


def environment_names() -> list[str]:
    return list(ENVIRONMENTS)


def make_environment(name: str, verifier: str = DEFAULT_VERIFIER, policy: SafetyPolicy | None = None) -> Environment:
    """The environment registered under `name`, or built by the entry point `name`; `verifier` is used by
    single_step, `policy` by all. An unknown name is a KeyError, an entry point that fails EnvironmentUnavailable."""
    if is_entry_point(name):
        return load_environment(name, policy or SafetyPolicy.default())
    if is_mcp(name):
        return McpEnvironment(server_command(name), policy)
    if name == SingleStepEnvironment.name:
        return SingleStepEnvironment(get_verifier(verifier, policy))
    if name == WorkbenchEnvironment.name:
        return WorkbenchEnvironment(policy=policy)
    if name == ReplayEnvironment.name:
        return ReplayEnvironment(policy)
    raise KeyError(f"unknown environment {name!r}; known: {', '.join(ENVIRONMENTS)}")


__all__ = ["Environment", "EnvironmentUnavailable", "Judgement", "StepResult", "environment_names",
           "make_environment"]
