from __future__ import annotations

import json

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.datasets.conversion import task_draft
from flywheel.datasets.models import RegressionTask
from flywheel.ingest.models import Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = pytest.mark.django_db


@pytest.fixture
def tau_failure(tau_bench_path) -> Trajectory:
    options = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=options)
    return Trajectory.objects.get(external_id="0:0")


def test_the_draft_holds_the_context_before_the_step_and_the_ground_truth_action(tau_failure):
    call = tau_failure.steps.filter(kind="tool_call", tool_name="book_reservation").first()
    draft = task_draft(trajectory=tau_failure, step_index=call.index)
    assert draft.wrong_call["name"] == "book_reservation"
    assert draft.messages[0]["role"] == "system" and draft.messages[-1]["role"] in ("user", "tool", "assistant")
    assert len(draft.messages) < tau_failure.step_count
    truth = draft.expected_calls()[0]
    assert truth["name"] == "book_reservation" and truth["arguments"]["user_id"] == ["mia_li_3668"]
    assert {tool["function"]["name"] for tool in draft.tools} >= {"book_reservation", "get_user_details"}


def test_a_reviewer_converts_a_tau_bench_failure_into_a_held_out_task(client, make_user, tau_failure):
    client.force_login(make_user(Role.REVIEWER))
    call = tau_failure.steps.filter(kind="tool_call", tool_name="book_reservation").first()
    url = reverse("datasets:task_from_trajectory", args=[tau_failure.id]) + f"?step={call.index}"
    form = client.get(url).context["form"]
    assert json.loads(form.initial["expected_calls"])[0]["arguments"]["origin"] == ["JFK"]
    response = client.post(url, {**form.initial, "split": "heldout"})
    assert response.status_code == 302, response.content.decode()[:2000]
    task = RegressionTask.objects.get()
    assert (task.split, task.source_kind, task.source_trajectory_id) == ("heldout", "trajectory", tau_failure.id)
    assert task.content["expected_calls"][0]["name"] == "book_reservation"
    assert task.content["messages"] and task.agent.name == "airline"


def test_an_expected_call_that_violates_the_schema_is_refused_on_the_page(client, make_user, tau_failure):
    client.force_login(make_user(Role.REVIEWER))
    url = reverse("datasets:task_from_trajectory", args=[tau_failure.id])
    form = client.get(url).context["form"]
    bad = json.dumps([{"name": "get_user_details", "arguments": {"user_id": [42]}}])
    response = client.post(url, {**form.initial, "split": "heldout", "expected_calls": bad})
    assert response.status_code == 200 and "does not fit its schema" in response.content.decode()
    assert not RegressionTask.objects.exists()


def test_a_task_can_be_written_from_scratch(client, make_user):
    client.force_login(make_user(Role.REVIEWER))
    tools = [{"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]
    data = {
        "external_id": "ping-1", "split": "train", "tools": json.dumps(tools),
        "messages": json.dumps([{"role": "user", "content": "ping the server"}]),
        "expected_calls": json.dumps([{"name": "ping", "arguments": {}}]),
    }  # fmt: skip
    assert client.post(reverse("datasets:task_new"), data).status_code == 302
    assert RegressionTask.objects.get().source_kind == "manual"


def test_the_review_page_links_to_convert_at_the_marked_step(client, make_user, tau_failure):
    client.force_login(make_user(Role.REVIEWER))
    page = client.get(reverse("triage:review", args=[tau_failure.id])).content.decode()
    assert reverse("datasets:task_from_trajectory", args=[tau_failure.id]) in page
