"""Preference pairs: from human interventions, the leakage rule they share with tasks, snapshots of pairs,
and their lines in TRL's conversational preference format."""

from __future__ import annotations

import json

import pytest

from flywheel.core.roles import Role
from flywheel.datasets.exports import snapshot_lines
from flywheel.datasets.models import PairSource, PreferencePair, SnapshotKind
from flywheel.datasets.pairs import LINE_KEYS, pair_line
from flywheel.datasets.services import (
    PairRefused,
    TaskOrigin,
    TaskRefused,
    intervention_pairs_create,
    pair_snapshot_create,
    snapshot_create,
    task_create,
)
from flywheel.ingest.models import Trajectory
from flywheel.triage.services import CorrectionInput, correction_create
from tests.flywheel.triage.conftest import call, result, shop_record, store, user  # noqa: F401  (a fixture)
from trainer.contracts import Task, ToolCall

pytestmark = pytest.mark.django_db
CANCEL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "refund_order", "arguments": {"order_id": "1234", "amount": 80}}}]}


def _supervised(store, external_id: str = "run-1", text: str = "Please refund order 1234.") -> Trajectory:  # noqa: F811
    """The docs' example: the agent's refund fails, a supervisor steps in, the agent answers."""
    steps = [{"kind": "system", "text": "You are the support agent."}, user(text),
             call("refund_order", {"order_id": "1234", "amount": 80}, "c2"),
             result("refund_order", "Error: shipped orders cannot be refunded", error=True, call_id="c2"),
             {"kind": "error", "text": "agent exceeded its retry budget"},
             {"kind": "human_intervention", "text": "Supervisor: offer a return label instead."},
             {"kind": "assistant", "text": "Here is a return label."}]  # fmt: skip
    return store(shop_record(external_id, steps))[external_id]


@pytest.fixture
def reviewer(make_user):
    return make_user(Role.REVIEWER, "rita")


def test_a_human_intervention_becomes_a_pair_against_the_agents_turn_before_it(store, reviewer):  # noqa: F811
    trajectory = _supervised(store)
    [pair] = intervention_pairs_create(actor=reviewer, trajectory=trajectory)
    assert pair.source == PairSource.HUMAN_INTERVENTION and pair.step_index == 5 and pair.split == "train"
    assert pair.prompt == [{"role": "system", "content": "You are the support agent."},
                           {"role": "user", "content": "Please refund order 1234."}]  # fmt: skip
    assert pair.chosen == [{"role": "assistant", "content": "Supervisor: offer a return label instead."}]
    assert pair.rejected == [CANCEL]


def test_converting_interventions_twice_makes_no_second_pair(store, reviewer):  # noqa: F811
    trajectory = _supervised(store)
    intervention_pairs_create(actor=reviewer, trajectory=trajectory)
    assert intervention_pairs_create(actor=reviewer, trajectory=trajectory) == []
    assert PreferencePair.objects.count() == 1


def test_an_intervention_after_a_user_turn_overrode_nothing_and_makes_no_pair(store, reviewer):  # noqa: F811
    steps = [user(), {"kind": "human_intervention", "text": "Supervisor here, I will take it."}]
    trajectory = store(shop_record("run-2", steps))["run-2"]
    assert intervention_pairs_create(actor=reviewer, trajectory=trajectory) == []


def test_a_pair_takes_the_split_its_prompts_tasks_are_in(store, reviewer):  # noqa: F811
    trajectory = _supervised(store)
    task = Task(id="held", messages=[{"role": "user", "content": "Please refund order 1234!"}], tools=[],
                expected_calls=[], no_call_expected=True)  # fmt: skip
    task_create(actor=None, task=task, split="heldout", agent=trajectory.agent, origin=TaskOrigin("manual"))
    [pair] = intervention_pairs_create(actor=reviewer, trajectory=trajectory)
    assert pair.split == "heldout"


def test_a_task_whose_prompt_has_a_pair_in_the_other_split_is_refused(store, reviewer):  # noqa: F811
    intervention_pairs_create(actor=reviewer, trajectory=_supervised(store))
    task = Task(id="leaky", messages=[{"role": "user", "content": "please refund order 1234"}], tools=[],
                expected_calls=[], no_call_expected=True)  # fmt: skip
    with pytest.raises(TaskRefused, match="same prompt as preference pair"):
        task_create(actor=None, task=task, split="heldout", agent=None, origin=TaskOrigin("manual"))


def test_a_snapshot_of_pairs_freezes_their_lines_and_the_same_pairs_give_the_same_snapshot(store, reviewer):  # noqa: F811
    first = _supervised(store)
    second = _supervised(store, "run-4", "Refund order 99 please.")
    for trajectory in (first, second):
        intervention_pairs_create(actor=reviewer, trajectory=trajectory)
    snapshot = pair_snapshot_create(actor=reviewer, name="pairs", split="train", agent=first.agent)
    assert snapshot.kind == SnapshotKind.PAIRS and snapshot.task_count == 2
    assert pair_snapshot_create(actor=reviewer, name="again", split="train", agent=first.agent) == snapshot
    PreferencePair.objects.update(chosen=[{"role": "assistant", "content": "edited later"}])
    lines = [json.loads(line) for line in snapshot_lines(snapshot, "native")]
    assert [line["chosen"][0]["content"] for line in lines] == ["Supervisor: offer a return label instead."] * 2
    with pytest.raises(PairRefused, match="no heldout preference pairs"):
        pair_snapshot_create(actor=reviewer, name="none", split="heldout", agent=first.agent)


def test_a_pair_line_is_trls_conversational_preference_format_and_round_trips(store, reviewer):  # noqa: F811
    trajectory = _supervised(store)
    fix = CorrectionInput(step_index=2, call=ToolCall("lookup_order", {"order_id": "1234"}), make_pair=True)
    correction_create(actor=reviewer, trajectory=trajectory, fix=fix)
    snapshot = pair_snapshot_create(actor=reviewer, name="pairs", split="train", agent=trajectory.agent)
    [line] = [json.loads(text) for text in snapshot_lines(snapshot, "trl")]
    pair = PreferencePair.objects.get()
    assert set(line) == set(LINE_KEYS) and line == json.loads(json.dumps(pair_line(pair)))
    assert line["id"] == str(pair.pk) and line["rejected"] == [CANCEL]
    assert all(tool["type"] == "function" and "parameters" in tool["function"] for tool in line["tools"])
    rendered = _trl_rendered(line)
    assert rendered["chosen"].startswith('<tool_call>{"name": "lookup_order", "arguments": {"order_id": "1234"}}')
    assert rendered["rejected"].startswith('<tool_call>{"name": "refund_order", "arguments": {"amount": 80, ')
    assert "Please refund order 1234." in rendered["prompt"] and '"name": "lookup_order"' in rendered["prompt"]


def _trl_rendered(line: dict) -> dict:
    """TRL's own preprocessing of the line: the tiny test model's tokenizer (no network) with the served chat
    template, which renders tool calls and the tools offered as the trainer's prompts do."""
    from transformers import AutoTokenizer
    from trl.data_utils import apply_chat_template, is_conversational

    from tests.trainer.tiny_model import TINY_MODEL
    from trainer.prompts import served_chat_template

    assert is_conversational(line)
    tokenizer = AutoTokenizer.from_pretrained(str(TINY_MODEL))
    tokenizer.chat_template = served_chat_template()
    return apply_chat_template(line, tokenizer, tools=line.get("tools"))


def test_a_pairs_snapshot_launches_no_job_that_runs_on_tasks(store, reviewer):  # noqa: F811
    from flywheel.training.services import LaunchRefused, job_launch

    trajectory = _supervised(store)
    intervention_pairs_create(actor=reviewer, trajectory=trajectory)
    pairs = pair_snapshot_create(actor=reviewer, name="pairs", split="train", agent=trajectory.agent)
    with pytest.raises(LaunchRefused, match="a sft job runs on a snapshot of tasks"):
        job_launch(actor=reviewer, kind="sft", snapshot=pairs, base_model="tiny")
    task = Task(id="t", messages=[{"role": "user", "content": "hi"}], tools=[], expected_calls=[],
                no_call_expected=True)  # fmt: skip
    task_create(actor=None, task=task, split="train", agent=trajectory.agent, origin=TaskOrigin("manual"))
    tasks = snapshot_create(actor=None, name="tasks", split="train", agent=trajectory.agent)
    with pytest.raises(LaunchRefused, match="holds preference pairs"):
        job_launch(actor=reviewer, kind="eval", snapshot=tasks, base_model="tiny", heldout_snapshot=pairs)
