"""Episode tasks from real tau-bench airline failures: the draft, the conversion page, validation, the task page."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.datasets.conversion import episode_draft, task_draft
from flywheel.datasets.models import RegressionTask
from flywheel.datasets.services import TaskOrigin, TaskRefused, snapshot_create, task_create
from flywheel.ingest.models import StepKind, Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.training.models import EvalRun
from flywheel.training.services import job_launch
from tests.flywheel.ingest.conftest import TAU_MAPPING
from tests.flywheel.training.conftest import TINY_MODEL, wait_for
from trainer.contracts import EpisodeSetup, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def airline(tau_bench_path) -> None:
    options = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=options)


@pytest.fixture
def change_flight(airline) -> Trajectory:
    """tau-bench airline task 22, trial 0: a flight change that misses one of the two updates the truth makes."""
    return Trajectory.objects.get(external_id="22:0")


def user_turn(trajectory: Trajectory, starts_with: str) -> int:
    return trajectory.steps.get(kind=StepKind.USER, text__startswith=starts_with).index


def calls_after(trajectory: Trajectory, index: int) -> list[tuple[str, dict]]:
    steps = trajectory.steps.filter(kind=StepKind.TOOL_CALL, index__gt=index).order_by("index")
    return [(step.tool_name, step.tool_arguments) for step in steps]


def convert_url(trajectory: Trajectory, **query: object) -> str:
    base = reverse("datasets:task_from_trajectory", args=[trajectory.id])
    return base + ("?" + "&".join(f"{key}={value}" for key, value in query.items()) if query else "")


# --- The draft --------------------------------------------------------------------------------


def test_by_default_the_episode_starts_at_the_user_turn_before_the_failing_call(change_flight):
    draft = task_draft(trajectory=change_flight)
    episode = episode_draft(trajectory=change_flight, draft=draft)
    start = user_turn(change_flight, "Yes, please go ahead")
    assert episode.start_index == start < draft.step_index
    assert episode.messages[-1] == {"role": "user", "content": change_flight.steps.get(index=start).text}
    assert [(call["name"], call["arguments"]) for call in episode.recorded] == calls_after(change_flight, start)
    assert episode.recorded[0]["result"]["reservation_id"] == "OWZ4XL"  # the recorded JSON result, parsed
    # The truth's lookups were all made before the start: only its two flight updates remain.
    assert [call["name"] for call in episode.expected] == ["update_reservation_flights"] * 2


def test_an_earlier_start_records_every_call_after_it_and_keeps_the_truth_not_yet_made(change_flight):
    start = user_turn(change_flight, "The reservation ID is OWZ4XL")
    episode = episode_draft(trajectory=change_flight, draft=task_draft(trajectory=change_flight), start=start)
    assert [name for name, _ in calls_after(change_flight, start)] == [call["name"] for call in episode.recorded] == [
        "get_reservation_details", "search_direct_flight", "calculate", "update_reservation_flights",
    ]  # fmt: skip
    assert [call["name"] for call in episode.expected] == [
        "get_reservation_details", "search_direct_flight", "update_reservation_flights", "update_reservation_flights",
    ]  # fmt: skip
    assert episode.expected[0]["arguments"] == {"reservation_id": ["OWZ4XL"]}
    assert episode.messages[-1]["content"] == "The reservation ID is OWZ4XL."
    made = [call["function"]["name"] for message in episode.messages for call in message.get("tool_calls") or []]
    assert made == ["get_user_details"]  # the context holds only what happened before the start


def test_a_result_that_is_not_json_is_recorded_as_its_text(airline):
    failure = Trajectory.objects.get(external_id="0:0")  # book_reservation answered "Error: payment amount ..."
    episode = episode_draft(trajectory=failure, draft=task_draft(trajectory=failure))
    assert episode.recorded[0]["name"] == "book_reservation"
    assert episode.recorded[0]["result"].startswith("Error: payment amount does not add up")


def test_an_episode_cannot_start_at_a_step_that_is_not_a_user_turn(change_flight):
    call = change_flight.steps.filter(kind=StepKind.TOOL_CALL).first()
    with pytest.raises(ValueError, match="not a user turn"):
        episode_draft(trajectory=change_flight, draft=task_draft(trajectory=change_flight), start=call.index)


# --- The conversion page ----------------------------------------------------------------------


def test_a_reviewer_converts_a_multi_turn_failure_into_an_episode_task(client, make_user, change_flight):
    client.force_login(make_user(Role.REVIEWER))
    start = user_turn(change_flight, "The reservation ID is OWZ4XL")
    url = convert_url(change_flight, mode="episode", start=start)
    page = client.get(url)
    assert 'value="episode" checked' in page.content.decode() and page.context["episode"].start_index == start
    form = page.context["form"]
    assert form.initial["external_id"] == f"22:0@turn{start}"
    response = client.post(url, {**form.initial, "split": "heldout"})
    assert response.status_code == 302, response.content.decode()[:2000]
    task = RegressionTask.objects.get()
    assert (task.environment, task.source_ref, task.agent.name) == ("replay", f"episode from step {start}", "airline")
    stored = Task.from_json(task.content)
    assert Task.from_json(stored.to_json()) == stored
    assert stored.episode == EpisodeSetup(environment="replay", start_state={"recorded": [
        {"name": name, "arguments": arguments, "result": stored.episode.start_state["recorded"][number]["result"]}
        for number, (name, arguments) in enumerate(calls_after(change_flight, start))
    ]})  # fmt: skip
    assert [call.name for call in stored.expected_calls][0] == "get_reservation_details"


def test_the_next_call_conversion_still_makes_a_single_step_task(client, make_user, change_flight):
    client.force_login(make_user(Role.REVIEWER))
    url = convert_url(change_flight)
    form = client.get(url).context["form"]
    assert client.post(url, {**form.initial, "split": "heldout"}).status_code == 302
    task = RegressionTask.objects.get()
    assert task.environment == "single_step" and "episode" not in task.content


def test_an_episode_task_is_validated_like_any_task(client, make_user, change_flight):
    client.force_login(make_user(Role.REVIEWER))
    url = convert_url(change_flight, mode="episode")
    form = client.get(url).context["form"]
    unknown = json.dumps([{"name": "rebook_everything", "arguments": {}}])
    page = client.post(url, {**form.initial, "split": "heldout", "expected_calls": unknown}).content.decode()
    assert "no such tool among the task&#x27;s tools" in page and not RegressionTask.objects.exists()


def test_the_service_refuses_a_replay_episode_without_a_readable_recording(change_flight):
    draft = episode_draft(trajectory=change_flight, draft=task_draft(trajectory=change_flight))
    unnamed = {"environment": "replay", "start_state": {"recorded": [{"arguments": {}}]}}
    content = {"id": "bad-recording", "messages": draft.messages, "tools": draft.tools,
               "expected_calls": draft.expected, "episode": unnamed}  # fmt: skip
    with pytest.raises(TaskRefused, match="recorded call 1 needs a 'name'"):
        task_create(actor=None, task=Task.from_json(content), split="heldout", agent=change_flight.agent,
                    origin=TaskOrigin(source_kind="trajectory", environment="replay"))  # fmt: skip


def test_a_viewer_cannot_convert_and_an_outsider_cannot_see_the_trajectory(client, make_user, change_flight):
    url = convert_url(change_flight, mode="episode")
    client.force_login(make_user(Role.VIEWER))
    assert client.get(url).status_code == 403
    other = Agent.objects.create(name="another-agent")
    client.force_login(make_user(Role.REVIEWER, agents=[other]))
    assert client.get(url).status_code == 404
    assert client.post(url, {"external_id": "x", "split": "heldout"}).status_code == 404
    assert not RegressionTask.objects.exists()


def test_an_unknown_start_is_not_found(client, make_user, change_flight):
    client.force_login(make_user(Role.REVIEWER))
    call = change_flight.steps.filter(kind=StepKind.TOOL_CALL).first()
    assert client.get(convert_url(change_flight, mode="episode", start=call.index)).status_code == 404


# --- The task page ----------------------------------------------------------------------------


@pytest.fixture
def episode_task(client, make_user, change_flight) -> RegressionTask:
    client.force_login(make_user(Role.REVIEWER))
    url = convert_url(change_flight, mode="episode", start=user_turn(change_flight, "The reservation ID is OWZ4XL"))
    form = client.get(url).context["form"]
    assert client.post(url, {**form.initial, "split": "heldout"}).status_code == 302
    return RegressionTask.objects.get()


def test_the_task_page_shows_the_environment_the_recording_and_which_calls_the_replay_answers(
    client, make_user, episode_task
):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("datasets:task_detail", args=[episode_task.id])).content.decode()
    assert "<code data-episode-environment>replay</code>" in page
    recorded = re.findall(r'<tr data-recorded="([^"]+)">', page)
    assert recorded == [call["name"] for call in episode_task.content["episode"]["start_state"]["recorded"]]
    assert "&quot;OWZ4XL&quot;" in page  # a recorded call's arguments, compactly
    answers = re.findall(r'<tr data-expected="([^"]+)" data-answerable="(yes|no)"', page)
    # The truth's second flight update (HAT202 + HAT232) was never made in production: nothing recorded answers it.
    assert answers == [("get_reservation_details", "yes"), ("search_direct_flight", "yes"),
                       ("update_reservation_flights", "no"), ("update_reservation_flights", "yes")]  # fmt: skip
    assert page.count("answered from the recording") == 3
    assert page.count("no recorded result: the replay answers with an error") == 1


def test_the_task_page_shows_the_conversation_in_the_trace_viewer(client, make_user, episode_task):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("datasets:task_detail", args=[episode_task.id])).content.decode()
    assert page.count('class="step kind-tool_call"') == 1  # get_user_details, made before the start
    assert '<code class="tool-name">get_user_details</code>' in page
    assert page.count('class="step kind-user"') == 4


def test_a_task_that_is_not_an_episode_shows_no_episode_section(client, make_user, change_flight):
    client.force_login(make_user(Role.REVIEWER))
    url = convert_url(change_flight)
    form = client.get(url).context["form"]
    client.post(url, {**form.initial, "split": "heldout"})
    page = client.get(reverse("datasets:task_detail", args=[RegressionTask.objects.get().id])).content.decode()
    assert "Single-step tool call" in page and "data-episode-environment" not in page and "data-recorded" not in page


def test_an_agent_that_names_its_environment_gets_its_episodes_played_there(client, make_user, change_flight):
    Agent.objects.filter(pk=change_flight.agent_id).update(environment="workbench")
    client.force_login(make_user(Role.REVIEWER))
    url = convert_url(change_flight, mode="episode")
    page = client.get(url)
    assert "<code data-episode-environment>workbench</code>" in page.content.decode()
    assert client.post(url, {**page.context["form"].initial, "split": "heldout"}).status_code == 302
    task = RegressionTask.objects.get()
    assert task.environment == "workbench" and task.content["episode"]["environment"] == "workbench"
    assert task.content["episode"]["start_state"]["recorded"]  # kept: the recording is the trajectory's either way


# --- Evaluated on a worker --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_converted_episode_task_is_evaluated_in_the_replay_on_a_worker(episode_task, make_user,
                                                                        celery_worker_process):
    celery_worker_process("gpu")
    snapshot = snapshot_create(actor=None, name="airline-episodes", split="heldout", agent=episode_task.agent)
    job = job_launch(actor=make_user(Role.TRAINER), kind="eval", snapshot=snapshot, base_model=str(TINY_MODEL),
                     hyperparameters={"device": "cpu", "max_new_tokens": 16, "max_turns": 2})  # fmt: skip
    job = wait_for(job, ("succeeded", "failed"), timeout=300)
    assert job.state == "succeeded", job.error + job.log_tail
    assert "environment" not in job.hyperparameters  # the agent names none: the task's own replay plays it
    assert "in the environment each task names" in job.log_tail
    (result,) = EvalRun.objects.get(job=job).results
    assert result["ended"] and 1 <= result["turns"] <= 2 and result["episode"]
    # Judged by the replay's ground truth (a random model makes none of the four calls), not left unjudged.
    assert result["execution_success"] is False
    assert "expected call 1 of 4, get_reservation_details, was not made" in result["verdict"]["reason"]
