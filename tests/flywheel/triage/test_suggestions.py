"""Each suggestion rule on a case where it must fire and one where it must not.

Real tau-bench failures where a rule applies to them (incomplete execution, needs review, unsafe
actions under a configured policy); constructed trajectories for the rest, once as pure
`TraceFacts` and once stored through ingest, so the rules see what the database holds.
"""

from __future__ import annotations

import pytest

from flywheel.core.models import Agent
from flywheel.triage.models import AgentPolicy, Suggestion
from flywheel.triage.services import suggestions_compute
from flywheel.triage.suggestions import NEEDS_REVIEW, StepFacts, TraceFacts, suggest
from tests.flywheel.triage.conftest import call, shop_record, user
from trainer.verifiers.safety import SafetyPolicy

CATALOGUE = [
    {
        "type": "function",
        "function": {
            "name": "refund_order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id", "amount"],
            },
        },
    },
    {"type": "function", "function": {"name": "run_sql", "parameters": {"type": "object", "properties": {"q": {}}}}},
]
INFERRED = [{"type": "function", "function": {"name": "refund_order", "parameters": {"properties": {"order_id": {}}}}}]


def tool_call(index: int, name: str, arguments=None, raw: str = "") -> StepFacts:
    return StepFacts(index, "tool_call", name, arguments, raw)


def tool_result(index: int, name: str, text: str = "ok", *, error: bool = False) -> StepFacts:
    return StepFacts(index, "tool_result", name, is_error=error, text=text)


def rules(steps, *, outcome: str = "failure", tools=CATALOGUE, policy=None) -> list[tuple[str, int | None]]:
    facts = TraceFacts(outcome, steps, tools, policy or SafetyPolicy.default())
    return [(found.rule, found.step_index) for found in suggest(facts)]


def stored_rules(trajectory) -> list[tuple[str, str | None, int | None]]:
    rows = Suggestion.objects.filter(trajectory=trajectory).order_by("id")
    return [(row.rule, row.bucket.slug if row.bucket else None, row.step_index) for row in rows]


# --- format error: arguments that are not a JSON object ---------------------------------------


def test_a_call_whose_arguments_are_not_valid_json_is_a_format_error():
    facts = TraceFacts("failure", [tool_call(0, "refund_order", raw='{"order_id": "17", amount: 5}')], CATALOGUE)
    [found] = suggest(facts)
    assert (found.rule, found.bucket, found.step_index) == ("invalid-arguments", "format_error", 0)
    assert "invalid JSON at position 19" in found.reason


def test_arguments_that_are_a_json_string_are_a_format_error_too():
    assert rules([tool_call(3, "refund_order", "order 17")])[0] == ("invalid-arguments", 3)


def test_a_call_with_valid_complete_arguments_is_no_format_error():
    assert rules([tool_call(0, "refund_order", {"order_id": "17", "amount": 5})], outcome="success") == []


# --- format error: required arguments missing --------------------------------------------------


def test_a_call_missing_a_required_argument_of_a_declared_schema_is_a_format_error():
    facts = TraceFacts("failure", [tool_call(1, "refund_order", {"order_id": "17"})], CATALOGUE)
    [found] = suggest(facts)
    assert (found.rule, found.bucket) == ("missing-required-arguments", "format_error")
    assert "without amount" in found.reason and "declared tool schema" in found.reason


def test_an_inferred_catalogue_has_no_required_arguments_to_miss():
    assert rules([tool_call(1, "refund_order", {})], outcome="unknown", tools=INFERRED) == []


# --- hallucinated API ----------------------------------------------------------------------------


def test_a_call_to_a_tool_outside_the_catalogue_is_a_hallucinated_api():
    facts = TraceFacts("failure", [tool_call(2, "refund_everything", {})], CATALOGUE)
    [found] = suggest(facts)
    assert (found.rule, found.bucket, found.step_index) == ("unknown-tool", "hallucinated_api", 2)
    assert "'refund_everything' is not in the agent's tool catalogue (refund_order, run_sql)" in found.reason


def test_without_a_catalogue_no_tool_counts_as_unknown():
    assert rules([tool_call(2, "refund_everything", {})], outcome="unknown", tools=[]) == []


def test_an_argument_the_schema_does_not_define_is_a_hallucinated_api():
    steps = [tool_call(0, "refund_order", {"order_id": "17", "amount": 5, "force": True})]
    assert rules(steps) == [("unknown-argument", 0)]


def test_a_schema_without_properties_accepts_any_argument_name():
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    assert rules([tool_call(0, "run", {"anything": 1})], outcome="unknown", tools=tools) == []


# --- unsafe action -------------------------------------------------------------------------------


def test_a_call_the_default_safety_policy_denies_is_an_unsafe_action():
    facts = TraceFacts("success", [tool_call(4, "run_sql", {"q": "DROP TABLE users"})], CATALOGUE)
    [found] = suggest(facts)
    assert (found.rule, found.bucket, found.step_index) == ("safety/sql-drop", "unsafe_action", 4)
    assert "rule sql-drop of the 'default' safety policy" in found.reason


def test_a_harmless_call_breaks_no_safety_rule():
    assert rules([tool_call(4, "run_sql", {"q": "SELECT 1"})], outcome="success") == []


# --- incomplete execution ----------------------------------------------------------------------


def test_a_tool_error_never_recovered_from_is_incomplete_execution():
    steps = [
        tool_call(0, "refund_order", {"order_id": "1", "amount": 2}),
        tool_result(1, "refund_order", "Error: no", error=True),
    ]
    assert rules(steps) == [("unrecovered-tool-error", 1)]


def test_a_tool_error_followed_by_a_success_of_the_same_tool_was_recovered():
    steps = [
        tool_result(1, "refund_order", "Error: no", error=True),
        tool_result(3, "lookup_order", "found"),
        tool_result(5, "refund_order", "refunded"),
    ]
    assert rules(steps, outcome="unknown", tools=[]) == []


def test_a_successful_trajectory_is_never_incomplete():
    assert rules([tool_result(1, "refund_order", "Error: no", error=True)], outcome="success", tools=[]) == []


# --- needs review --------------------------------------------------------------------------------


def test_a_failure_no_rule_explains_needs_review():
    assert rules([StepFacts(0, "user", text="hi")]) == [(NEEDS_REVIEW, None)]


def test_a_failure_a_rule_explains_does_not_also_need_review():
    assert NEEDS_REVIEW not in dict(rules([tool_call(0, "nope", {})]))


def test_a_success_does_not_need_review():
    assert rules([StepFacts(0, "user", text="hi")], outcome="success") == []


# --- the same rules on stored trajectories ---------------------------------------------------------


@pytest.mark.django_db
def test_stored_constructed_trajectories_get_format_and_hallucination_suggestions(store):
    stored = store(
        shop_record("bad-json", [user(), call("refund_order", '{"order_id": "17", amount: 5}')]),
        shop_record("missing", [user(), call("refund_order", {"order_id": "17"})]),
        shop_record("made-up", [user(), call("refund_all_orders", {"confirm": True})]),
        shop_record("fine", [user(), call("refund_order", {"order_id": "17", "amount": 5})], outcome="success"),
    )
    assert stored_rules(stored["bad-json"]) == [("invalid-arguments", "format_error", 1)]
    assert stored_rules(stored["missing"]) == [("missing-required-arguments", "format_error", 1)]
    assert stored_rules(stored["made-up"]) == [("unknown-tool", "hallucinated_api", 1)]
    assert stored_rules(stored["fine"]) == []


@pytest.mark.django_db
def test_a_real_tau_bench_failure_that_never_recovered_is_incomplete_execution(tau_airline):
    [(rule, bucket, step)] = stored_rules(tau_airline["15:0"])
    assert (rule, bucket, step) == ("unrecovered-tool-error", "incomplete_execution", 17)
    reason = Suggestion.objects.get(trajectory=tau_airline["15:0"]).reason
    assert "update_reservation_flights returned an error ('Error: not enough seats on flight HAT290')" in reason


@pytest.mark.django_db
def test_a_real_tau_bench_failure_that_recovered_from_its_tool_error_needs_review_instead(tau_airline):
    trajectory = tau_airline["0:0"]
    assert trajectory.steps.filter(is_error=True).exists()
    assert stored_rules(trajectory) == [(NEEDS_REVIEW, None, None)]


@pytest.mark.django_db
def test_real_tau_bench_successes_get_no_suggestion_despite_tool_errors(tau_airline):
    assert tau_airline["11:0"].steps.filter(is_error=True).exists()
    assert stored_rules(tau_airline["11:0"]) == []


@pytest.mark.django_db
def test_under_the_default_policy_no_tau_bench_call_is_unsafe_and_every_failure_gets_a_suggestion(tau_airline):
    assert not Suggestion.objects.filter(bucket__slug="unsafe_action").exists()
    failures = [t for t in tau_airline.values() if t.outcome == "failure"]
    assert len(failures) == 116
    assert all(Suggestion.objects.filter(trajectory=t).exists() for t in failures)
    assert Suggestion.objects.filter(rule=NEEDS_REVIEW).count() == 110


@pytest.mark.django_db
def test_a_configured_policy_finds_real_tau_bench_calls_unsafe(tau_airline):
    policy = {"name": "airline-no-certificates", "denied_tools": ["send_certificate"]}
    AgentPolicy.objects.create(agent=Agent.objects.get(name="airline"), policy=policy)
    suggestions_compute(trajectory_ids=[t.pk for t in tau_airline.values()])
    unsafe = Suggestion.objects.filter(bucket__slug="unsafe_action").select_related("trajectory")
    assert sorted((s.trajectory.external_id, s.step_index, s.rule) for s in unsafe) == [
        ("16:3", 32, "safety/denied-tool"),
        ("37:0", 16, "safety/denied-tool"),
        ("40:2", 18, "safety/denied-tool"),
        ("45:0", 12, "safety/denied-tool"),
        ("45:3", 14, "safety/denied-tool"),
        ("46:1", 18, "safety/denied-tool"),
        ("46:2", 12, "safety/denied-tool"),
        ("46:3", 14, "safety/denied-tool"),
    ]
    assert "'airline-no-certificates' safety policy" in unsafe.get(trajectory__external_id="37:0").reason
    assert stored_rules(tau_airline["0:0"]) == [(NEEDS_REVIEW, None, None)]
