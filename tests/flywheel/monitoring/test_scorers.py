"""The online scorers on hand-built facts, and the sampling draw."""

from __future__ import annotations

import uuid

import pytest

from flywheel.monitoring.scorers import CATALOGUE, SAFETY, SCHEMA, sampled, score
from flywheel.triage.suggestions import StepFacts, TraceFacts
from trainer.contracts import openai_tool
from trainer.verifiers.safety import SafetyPolicy

from .conftest import DENY_DELETES, SHOP_TOOLS

TOOLS = [openai_tool(tool) for tool in SHOP_TOOLS]
POLICY = SafetyPolicy.from_json(DENY_DELETES)


def facts(*calls: tuple[str, object], tools=TOOLS, raw: str = "") -> TraceFacts:
    steps = [StepFacts(0, "user", text="hi")]
    steps += [StepFacts(index, "tool_call", tool_name=name, tool_arguments=arguments, tool_arguments_raw=raw)
              for index, (name, arguments) in enumerate(calls, start=1)]  # fmt: skip
    return TraceFacts(outcome="unknown", steps=steps, tools=tools, policy=POLICY)


def test_safety_fails_a_call_the_policy_denies_naming_the_rule_and_step():
    verdict = score(SAFETY, facts(("lookup_order", {"order_id": "A1"}), ("delete_account", {})))
    assert (verdict.passed, verdict.value) == (False, 0.0)
    [violation] = verdict.detail["violations"]
    assert (violation["rule"], violation["tool"], violation["step"]) == ("denied-tool", "delete_account", 2)
    assert verdict.detail["policy"] == "no-deletes"


def test_safety_passes_allowed_calls_and_a_trajectory_without_calls():
    assert score(SAFETY, facts(("lookup_order", {"order_id": "A1"}))).passed
    verdict = score(SAFETY, facts())
    assert (verdict.passed, verdict.value, verdict.detail["calls"]) == (True, 1.0, 0)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"order_id": 17, "amount": 5}, "refund_order: argument 'order_id' must be string, got integer"),
        ({"order_id": "A1"}, "refund_order: missing required argument 'amount'"),
        ({"order_id": "A1", "amount": 5, "note": "x"}, "refund_order: unknown argument 'note'"),
    ],
)
def test_schema_fails_arguments_that_break_the_tools_schema(arguments, problem):
    verdict = score(SCHEMA, facts(("refund_order", arguments)))
    assert not verdict.passed
    assert verdict.detail["problems"] == [{"step": 1, "tool": "refund_order", "problem": problem}]


def test_schema_fails_a_call_whose_arguments_cannot_be_read():
    verdict = score(SCHEMA, facts(("lookup_order", None), raw='{"order_id": "A1"'))
    assert not verdict.passed
    assert verdict.detail["problems"][0]["step"] == 1 and verdict.detail["problems"][0]["problem"]


def test_schema_passes_valid_calls_and_leaves_unknown_tools_to_the_catalogue():
    verdict = score(SCHEMA, facts(("refund_order", {"order_id": "A1", "amount": 5}), ("teleport", {"to": "Mars"})))
    assert verdict.passed and verdict.detail == {"calls": 2, "problems": []}


def test_catalogue_fails_a_tool_the_agent_does_not_have():
    verdict = score(CATALOGUE, facts(("lookup_order", {"order_id": "A1"}), ("teleport", {})))
    assert not verdict.passed
    assert verdict.detail["unknown"] == [{"step": 2, "tool": "teleport"}]
    assert score(CATALOGUE, facts(("lookup_order", {"order_id": "A1"}))).passed


def test_catalogue_does_not_apply_without_a_catalogue():
    assert score(CATALOGUE, facts(("teleport", {}), tools=())) is None


IDS = [uuid.UUID(int=number * 7919) for number in range(2000)]


def test_sampling_gives_the_same_answer_every_time():
    first = [sampled(rule_id=3, trajectory_id=pk, rate=0.3) for pk in IDS]
    assert first == [sampled(rule_id=3, trajectory_id=str(pk), rate=0.3) for pk in IDS]


def test_sampling_takes_about_the_rate_and_none_or_all_at_the_ends():
    share = sum(sampled(rule_id=3, trajectory_id=pk, rate=0.3) for pk in IDS) / len(IDS)
    assert 0.26 < share < 0.34
    assert not any(sampled(rule_id=3, trajectory_id=pk, rate=0.0) for pk in IDS)
    assert all(sampled(rule_id=3, trajectory_id=pk, rate=1.0) for pk in IDS)


def test_a_trajectory_sampled_at_a_rate_stays_sampled_at_a_higher_one():
    low = {pk for pk in IDS if sampled(rule_id=5, trajectory_id=pk, rate=0.2)}
    high = {pk for pk in IDS if sampled(rule_id=5, trajectory_id=pk, rate=0.6)}
    assert low and low < high


def test_rules_draw_independently():
    one = {pk for pk in IDS if sampled(rule_id=1, trajectory_id=pk, rate=0.5)}
    two = {pk for pk in IDS if sampled(rule_id=2, trajectory_id=pk, rate=0.5)}
    assert one != two
