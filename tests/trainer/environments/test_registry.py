"""The environment registry: names, construction, refusal of an unknown name."""

from __future__ import annotations

import pytest

from trainer.environments import environment_names, make_environment
from trainer.environments.single_step import SingleStepEnvironment
from trainer.environments.workbench import WorkbenchEnvironment
from trainer.verifiers.safety import SafetyPolicy


def test_the_built_in_environments_are_registered():
    assert environment_names() == ["single_step", "workbench", "replay"]


def test_single_step_uses_the_named_verifier():
    environment = make_environment("single_step", "binary")
    assert isinstance(environment, SingleStepEnvironment) and environment.label == "binary"


def test_workbench_gets_the_policy(workbench_data):
    policy = SafetyPolicy(name="strict")
    environment = make_environment("workbench", policy=policy)
    assert isinstance(environment, WorkbenchEnvironment) and environment.policy is policy


def test_an_unknown_environment_is_refused():
    with pytest.raises(KeyError, match="unknown environment 'tau'"):
        make_environment("tau")
