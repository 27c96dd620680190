"""Corrections of a failing step: checked against the agent's catalogue, stored all or nothing, and what they yield."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from flywheel.core.roles import Role
from flywheel.datasets.models import PairSource, PreferencePair, RegressionTask
from flywheel.ingest.models import Trajectory
from flywheel.triage.models import Correction, CorrectionKind
from flywheel.triage.services import CorrectionInput, correction_create
from tests.flywheel.triage.conftest import call, result, shop_record, user
from trainer.contracts import ToolCall

pytestmark = pytest.mark.django_db
PROMPT = [{"role": "user", "content": "Please refund order 17."}]
WRONG = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "refund_order", "arguments": {"order_id": "17", "amount": 500}}}]}
LOOKUP = ToolCall("lookup_order", {"order_id": "17"})


@pytest.fixture
def reviewer(make_user):
    return make_user(Role.REVIEWER, "rita")


@pytest.fixture
def refund(store) -> Trajectory:
    """A failing refund: the agent refunds too much (step 1), the tool refuses, the agent gives up."""
    steps = [user(), call("refund_order", {"order_id": "17", "amount": 500}, "c1"),
             result("refund_order", "Error: more than the order's total", error=True, call_id="c1"),
             {"kind": "assistant", "text": "Sorry, I could not refund it."}]  # fmt: skip
    return store(shop_record("refund-1", steps))["refund-1"]


def _nothing_stored() -> bool:
    return not (Correction.objects.exists() or PreferencePair.objects.exists() or RegressionTask.objects.exists())


def test_a_corrected_call_yields_a_pair_with_the_correction_chosen_and_the_agents_call_rejected(refund, reviewer):
    fix = CorrectionInput(step_index=1, call=LOOKUP, make_pair=True)
    correction = correction_create(actor=reviewer, trajectory=refund, fix=fix)
    pair = PreferencePair.objects.get()
    chosen = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "lookup_order", "arguments": {"order_id": "17"}}}]}  # fmt: skip
    assert (correction.kind, correction.original, correction.corrected, correction.reviewer) == (
        CorrectionKind.CALL, WRONG, chosen, reviewer)
    assert (pair.prompt, pair.chosen, pair.rejected, pair.source) == (PROMPT, [chosen], [WRONG], PairSource.CORRECTION)
    assert pair.correction == correction and pair.trajectory == refund and pair.split == "train"
    assert [tool["function"]["name"] for tool in pair.tools] == ["lookup_order", "refund_order"]
    assert correction.task is None and not RegressionTask.objects.exists()


def test_a_call_to_a_tool_outside_the_catalogue_is_refused_and_nothing_is_stored(refund, reviewer):
    fix = CorrectionInput(step_index=1, call=ToolCall("delete_order", {"order_id": "17"}), make_pair=True,
                          task_split="train")  # fmt: skip
    with pytest.raises(ValidationError, match="delete_order: not an offered tool"):
        correction_create(actor=reviewer, trajectory=refund, fix=fix)
    assert _nothing_stored()


@pytest.mark.parametrize(("arguments", "problem"), [
    ({"order_id": 17}, "argument 'order_id' must be string, got integer"),
    ({}, "missing required argument 'order_id'"),
    ({"order_id": "17", "reason": "x"}, "unknown argument 'reason'"),
])  # fmt: skip
def test_arguments_that_break_the_tools_schema_are_refused_and_nothing_is_stored(refund, reviewer, arguments, problem):
    fix = CorrectionInput(step_index=1, call=ToolCall("lookup_order", arguments), make_pair=True, task_split="train")
    with pytest.raises(ValidationError, match=problem):
        correction_create(actor=reviewer, trajectory=refund, fix=fix)
    assert _nothing_stored()


def test_an_sft_example_is_a_train_task_expecting_the_corrected_call(refund, reviewer):
    fix = CorrectionInput(step_index=1, call=LOOKUP, task_split="train", make_pair=True)
    correction = correction_create(actor=reviewer, trajectory=refund, fix=fix)
    task = correction.task
    assert task.split == "train" and task.source_trajectory == refund and task.source_ref == "step 1"
    assert task.content["expected_calls"] == [{"name": "lookup_order", "arguments": {"order_id": ["17"]}}]
    assert task.content["messages"] == PROMPT and task.agent == refund.agent
    assert PreferencePair.objects.get().split == "train"


def test_a_regression_task_is_held_out_and_the_pair_follows_it_there(refund, reviewer):
    fix = CorrectionInput(step_index=1, call=LOOKUP, task_split="heldout", make_pair=True, pair_split="train")
    correction = correction_create(actor=reviewer, trajectory=refund, fix=fix)
    assert correction.task.split == "heldout" and PreferencePair.objects.get().split == "heldout"


def test_a_corrected_answer_yields_a_task_that_expects_no_call(refund, reviewer):
    fix = CorrectionInput(step_index=1, answer="I can refund at most the order's total.", task_split="heldout",
                          make_pair=True)  # fmt: skip
    correction = correction_create(actor=reviewer, trajectory=refund, fix=fix)
    assert correction.kind == CorrectionKind.ANSWER
    assert correction.task.content["no_call_expected"] is True and correction.task.content["expected_calls"] == []
    assert PreferencePair.objects.get().chosen == [
        {"role": "assistant", "content": "I can refund at most the order's total."}]


def test_a_step_that_is_not_the_agents_is_refused(refund, reviewer):
    with pytest.raises(ValidationError, match="step 0 is a user step"):
        correction_create(actor=reviewer, trajectory=refund, fix=CorrectionInput(step_index=0, call=LOOKUP))
    assert _nothing_stored()


def test_a_correction_that_repeats_the_agent_is_refused(refund, reviewer):
    same = ToolCall("refund_order", {"order_id": "17", "amount": 500})
    with pytest.raises(ValidationError, match="what the agent did"):
        correction_create(actor=reviewer, trajectory=refund, fix=CorrectionInput(step_index=1, call=same))
    assert _nothing_stored()


def test_a_pair_that_would_leak_into_the_other_split_takes_its_correction_with_it(refund, reviewer):
    correction_create(actor=reviewer, trajectory=refund,
                      fix=CorrectionInput(step_index=1, call=LOOKUP, task_split="heldout"))  # fmt: skip
    again = CorrectionInput(step_index=3, answer="Let me look the order up first.", make_pair=True, pair_split="train")
    with pytest.raises(ValidationError, match="no pair made: leaks into Held-out"):
        correction_create(actor=reviewer, trajectory=refund, fix=again)
    assert Correction.objects.count() == 1 and not PreferencePair.objects.exists()
