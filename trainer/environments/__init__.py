"""Environments by name: each runs episodes of tasks and judges them.

- `single_step`: one assistant turn, judged by the task's verifier (nothing is executed).
- `workbench`: the multi-step workplace sandbox over WorkBench's tables, judged by its end state.

The contract is `trainer.environments.base.Environment`; `trainer.environments.batch` runs a
file of outputs through one (`python -m trainer verify --env ...`). No torch, no Django.
"""

from __future__ import annotations

from trainer.environments.base import Environment, Judgement, StepResult
from trainer.environments.single_step import SingleStepEnvironment
from trainer.environments.workbench import WorkbenchEnvironment
from trainer.verifiers import DEFAULT_VERIFIER, get_verifier
from trainer.verifiers.safety import SafetyPolicy

ENVIRONMENTS = (SingleStepEnvironment.name, WorkbenchEnvironment.name)


def environment_names() -> list[str]:
    return list(ENVIRONMENTS)


def make_environment(name: str, verifier: str = DEFAULT_VERIFIER, policy: SafetyPolicy | None = None) -> Environment:
    """The environment registered under `name`; `verifier` is used by single_step, `policy` by both."""
    if name == SingleStepEnvironment.name:
        return SingleStepEnvironment(get_verifier(verifier, policy))
    if name == WorkbenchEnvironment.name:
        return WorkbenchEnvironment(policy=policy)
    raise KeyError(f"unknown environment {name!r}; known: {', '.join(ENVIRONMENTS)}")


__all__ = ["Environment", "Judgement", "StepResult", "environment_names", "make_environment"]
