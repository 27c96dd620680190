"""A team's own environment by entry point: built for the agent's policy, or refused with the reason."""

from __future__ import annotations

import sys
import textwrap

import pytest

from trainer.environments import EnvironmentUnavailable, make_environment
from trainer.environments.entry_point import CALL_TIMEOUT_S, TimedEnvironment
from trainer.examples.orders import OrderDesk
from trainer.verifiers import SafetyPolicy


@pytest.fixture
def team_module(tmp_path, monkeypatch):
    """A module of the team's on the path, with factories good and bad."""
    (tmp_path / "team_envs.py").write_text(
        textwrap.dedent("""
        from trainer.examples.orders import OrderDesk

        def good(policy):
            return OrderDesk(policy)

        class Recorded(OrderDesk):
            def cannot_judge_variants(self):
                return "it answers from a recording"

        def recorded(policy):
            return Recorded(policy)

        def raises(policy):
            raise ConnectionError("the sandbox host is down")

        def wrong(policy):
            return {"not": "an environment"}

        not_callable = 3
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "team_envs"
    sys.modules.pop("team_envs", None)


def test_an_entry_point_builds_the_teams_environment_with_the_agents_policy(team_module):
    policy = SafetyPolicy.from_json({**SafetyPolicy.default().to_json(), "name": "order desk"})
    environment = make_environment(f"{team_module}:good", policy=policy)
    assert isinstance(environment, TimedEnvironment) and environment.call_timeout_s == CALL_TIMEOUT_S
    assert isinstance(environment.inner, OrderDesk) and environment.inner.policy == policy
    assert environment.label == "orders" and isinstance(environment.spawn().inner, OrderDesk)
    assert isinstance(make_environment("trainer.examples.orders:environment").inner, OrderDesk)


def test_a_teams_environment_says_for_itself_whether_it_can_judge_synthetic_variants(team_module):
    assert make_environment(f"{team_module}:good").cannot_judge_variants() == ""
    assert make_environment(f"{team_module}:recorded").cannot_judge_variants() == "it answers from a recording"


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("no_such_team_module:factory", "cannot import no_such_team_module: ModuleNotFoundError"),
        ("team_envs:absent", "team_envs has no absent"),
        ("team_envs:not_callable", "not_callable is not callable"),
        ("team_envs:raises", "its factory raised ConnectionError: the sandbox host is down"),
        ("team_envs:wrong", "its factory returned a dict, not a trainer.environments.base.Environment"),
    ],
)
def test_an_entry_point_that_cannot_build_an_environment_says_why(team_module, entry_point, message):
    with pytest.raises(EnvironmentUnavailable, match=message):
        make_environment(entry_point)


def test_a_name_that_is_neither_built_in_nor_an_entry_point_is_unknown():
    with pytest.raises(KeyError, match="unknown environment"):
        make_environment("orders")
