"""An episode task converted from a real tau-bench failure, evaluated with the replay environment and shown
on the evaluation page: per-task turns and why each episode ended, and the episode in the trace viewer.

The model is a scripted agent that reads each tool result to choose its next call, so the episode
only succeeds when the replay's recorded results reach it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict

import pytest
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.datasets.conversion import episode_draft, task_draft
from flywheel.datasets.models import RegressionTask, SourceKind
from flywheel.datasets.services import TaskOrigin, snapshot_create, task_create
from flywheel.ingest.models import StepKind, Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.ingest.trace import trace_steps
from flywheel.training.models import EvalRun, Job, Sample
from flywheel.training.services import job_event_store
from tests.flywheel.ingest.conftest import TAU_MAPPING
from trainer.contracts import SampleEvent, Task, event_from_json
from trainer.evaluate import Evaluation, TaskResult, evaluate_tasks
from trainer.rollout import Generation
from trainer.spec.environments import EpisodeBudget
from trainer.spec.eval import SamplingConfig
from trainer.verifiers import SafetyPolicy, get_verifier

pytestmark = pytest.mark.django_db
PAYMENT = "credit_card_9659780"


class FlightChanger:
    """Looks the reservation up, searches its route, rebooks its flights in economy, then takes the nonstop."""

    name = "scripted"

    def generate(self, prompts, sampling, hooks=None):
        return [[self._answer(json.loads(prompt))] for prompt in prompts]

    def _answer(self, messages: list[dict]) -> Generation:
        observed = self._observations(messages)
        seen = {name: json.loads(content) if content.startswith(("{", "[")) else content for name, content in observed}
        updates = sum(name == "update_reservation_flights" for name, _ in observed)
        reservation, flights = seen.get("get_reservation_details"), seen.get("search_direct_flight")
        if reservation is None:
            return _call("get_reservation_details", reservation_id="OWZ4XL")
        if flights is None:
            return _call("search_direct_flight", origin=reservation["origin"], destination=reservation["destination"],
                         date=reservation["flights"][0]["date"])  # fmt: skip
        booked = [{"flight_number": leg["flight_number"], "date": leg["date"]} for leg in reservation["flights"]]
        if updates == 0:
            return _call("update_reservation_flights", reservation_id="OWZ4XL", cabin="economy", flights=booked,
                         payment_id=PAYMENT)  # fmt: skip
        if updates == 1:
            nonstop = [{"flight_number": flights[0]["flight_number"], "date": booked[0]["date"]}]
            return _call("update_reservation_flights", reservation_id="OWZ4XL", cabin="economy", flights=nonstop,
                         payment_id=PAYMENT)  # fmt: skip
        return Generation(text="Your flight is changed.", prompt_tokens=100, completion_tokens=10, finished=True,
                          latency_s=0.5)  # fmt: skip

    @staticmethod
    def _observations(messages: list[dict]) -> list[tuple[str, str]]:
        """(tool name, result text) of every tool result the model has been shown so far."""
        calls = {call["id"]: call["function"]["name"]
                 for message in messages for call in message.get("tool_calls") or []}  # fmt: skip
        return [(calls[message["tool_call_id"]], message["content"]) for message in messages
                if message["role"] == "tool" and message["tool_call_id"] in calls]  # fmt: skip


def _call(name: str, **arguments: object) -> Generation:
    text = f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
    return Generation(text=text, prompt_tokens=100, completion_tokens=20, finished=True, latency_s=0.5)


@pytest.fixture
def episode_task(tau_bench_path) -> RegressionTask:
    """tau-bench airline 22:0 as an episode from "The reservation ID is OWZ4XL", as the conversion page saves it."""
    options = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=options)
    trajectory = Trajectory.objects.get(external_id="22:0")
    start = trajectory.steps.get(kind=StepKind.USER, text__startswith="The reservation ID is").index
    draft = episode_draft(trajectory=trajectory, draft=task_draft(trajectory=trajectory), start=start)
    task = Task.from_json({"id": "22:0@episode", "messages": draft.messages, "tools": draft.tools,
                           "expected_calls": draft.expected, "episode": draft.episode.to_json()})  # fmt: skip
    origin = TaskOrigin(source_kind=SourceKind.TRAJECTORY, environment="replay", source_trajectory_id=trajectory.id)
    return task_create(actor=None, task=task, split="heldout", agent=trajectory.agent, origin=origin)


def replayed(task: RegressionTask) -> TaskResult:
    evaluation = Evaluation(backend=FlightChanger(), render=lambda t: json.dumps(t.messages),
                            verifier=get_verifier("tool_call"), policy=SafetyPolicy.default())  # fmt: skip
    [result] = evaluate_tasks([Task.from_json(task.content)], evaluation, SamplingConfig(),
                              budget=EpisodeBudget(max_turns=8, max_tokens=1000))  # fmt: skip
    return result


def test_the_saved_episode_task_is_played_with_the_replay_and_passes_on_the_recorded_results(episode_task):
    result = replayed(episode_task)
    assert (result.turns, result.ended, result.verifier_pass, result.execution_success) == (5, "answered", True, True)
    tools = [message for message in result.episode if message["role"] == "tool"]
    assert json.loads(tools[0]["content"])["reservation_id"] == "OWZ4XL"  # recorded, answered
    assert json.loads(tools[1]["content"])[0]["flight_number"] == "HAT041"  # recorded, answered
    assert "error" in json.loads(tools[2]["content"])  # the rebooking production never made: nothing recorded
    assert json.loads(tools[3]["content"])["flights"][0]["flight_number"] == "HAT041"


@pytest.fixture
def episode_run(episode_task) -> EvalRun:
    snapshot = snapshot_create(actor=None, name="airline episodes", split="heldout", agent=episode_task.agent)
    job = Job.objects.create(kind="eval", snapshot=snapshot, base_model="demo", state="succeeded", attempts=1,
                             agent=episode_task.agent)  # fmt: skip
    results = [asdict(replayed(episode_task)), {**asdict(replayed(episode_task)), "task_id": "cut", "turns": 8,
                                                 "ended": "turn_budget"}]  # fmt: skip
    return EvalRun.objects.create(job=job, snapshot=snapshot, model_label="demo", metrics={}, results=results)


def test_each_episode_row_says_its_turns_why_it_ended_and_links_to_the_episode(client, make_user, episode_run):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:eval_detail", args=[episode_run.job_id])).content.decode()
    cells = re.findall(r"<td data-episode>(.*?)</td>", page, re.S)
    assert "5 turns, ended: answered" in cells[0] and "(answered without a call)" in cells[0]
    assert "8 turns, ended: turn_budget" in cells[1] and "(turn budget spent)" in cells[1]
    assert reverse("training:eval_episode", args=[episode_run.job_id, 1]) in cells[1]


def test_the_episode_opens_in_the_trace_viewer_after_the_tasks_conversation(client, make_user, episode_run):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:eval_episode", args=[episode_run.job_id, 0])).content.decode()
    context, episode = page.split("<h2>The episode</h2>")
    assert "The reservation ID is OWZ4XL." in context and "get_user_details" in context
    called = re.findall(r'<li class="step kind-tool_call" id="step-\d+">.*?<code class="tool-name">(\w+)</code>',
                        episode, re.S)  # fmt: skip
    assert called == ["get_reservation_details", "search_direct_flight", "update_reservation_flights",
                      "update_reservation_flights"]  # fmt: skip
    assert page.count('class="step kind-tool_result') == 4 + 1 and "Your flight is changed." in episode
    assert "answered without a call" in page and '<dd data-turns>5</dd>' in page
    ids = re.findall(r'id="(step-\d+)"', page)
    assert len(ids) == len(set(ids))


def test_an_episode_that_is_not_there_or_not_visible_is_not_found(client, make_user, episode_run):
    client.force_login(make_user(Role.VIEWER))
    assert client.get(reverse("training:eval_episode", args=[episode_run.job_id, 2])).status_code == 404
    client.force_login(make_user(Role.VIEWER, agents=[Agent.objects.create(name="another-agent")]))
    assert client.get(reverse("training:eval_episode", args=[episode_run.job_id, 0])).status_code == 404


def test_the_trace_adapter_reads_chat_messages_as_the_ingest_parser_does():
    steps = trace_steps([
        {"role": "user", "content": "change my flight"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1_0", "type": "function", "function": {"name": "lookup", "arguments": '{"id": "OWZ4XL"}'}}]},
        {"role": "tool", "tool_call_id": "call_1_0", "content": "Error: no such reservation"},
        {"role": "assistant", "content": "Sorry."},
    ], first=3)  # fmt: skip
    assert [(step.index, step.kind) for step in steps] == [(3, "user"), (4, "tool_call"), (5, "tool_result"),
                                                           (6, "assistant")]  # fmt: skip
    assert (steps[1].tool_name, steps[1].tool_arguments, steps[2].tool_name, steps[2].is_error) == (
        "lookup", {"id": "OWZ4XL"}, "lookup", True)  # fmt: skip


# --- Sampled episodes on the job page ---------------------------------------------------------


@pytest.fixture
def sampled_episode(episode_task) -> Sample:
    """A training job's sample event that carries an episode, stored as the runner stores every event."""
    RegressionTask.objects.filter(pk=episode_task.pk).update(split="train")
    snapshot = snapshot_create(actor=None, name="airline train", split="train", agent=episode_task.agent)
    job = Job.objects.create(kind="grpo", snapshot=snapshot, base_model="demo", state="running", attempts=1,
                             agent=episode_task.agent)  # fmt: skip
    result = replayed(episode_task)
    event = event_from_json({"event": "sample", "step": 4, "task_id": result.task_id, "prompt": "change my flight",
                             "completion": result.output, "reward": result.reward, "components": {"passed": 1.0},
                             "episode": result.episode})  # fmt: skip
    job_event_store(job=job, event=event)
    job_event_store(job=job, event=SampleEvent(step=4, task_id="one-answer", prompt="p", completion="c", reward=0.0))
    return Sample.objects.get(job=job, task_id=result.task_id)


def test_a_sampled_episode_is_linked_from_the_job_page_and_opens_in_the_trace_viewer(client, make_user,
                                                                                    sampled_episode):
    client.force_login(make_user(Role.VIEWER))
    job_page = client.get(reverse("training:job_detail", args=[sampled_episode.job_id])).content.decode()
    url = reverse("training:sample_episode", args=[sampled_episode.job_id, sampled_episode.id])
    assert job_page.count("data-sample-episode") == 1 and url in job_page  # the one-answer sample has no link
    page = client.get(url).content.decode()
    context, episode = page.split("<h2>The episode</h2>")
    assert "The reservation ID is OWZ4XL." in context
    called = re.findall(r'<li class="step kind-tool_call" id="step-\d+">.*?<code class="tool-name">(\w+)</code>',
                        episode, re.S)  # fmt: skip
    assert called == ["get_reservation_details", "search_direct_flight", "update_reservation_flights",
                      "update_reservation_flights"]  # fmt: skip
    assert "Your flight is changed." in episode and "<dd data-step>4</dd>" in page


def test_a_sample_that_is_one_answer_or_not_visible_has_no_episode_page(client, make_user, sampled_episode):
    one_answer = Sample.objects.get(job=sampled_episode.job, task_id="one-answer")
    client.force_login(make_user(Role.VIEWER))
    assert client.get(reverse("training:sample_episode", args=[one_answer.job_id, one_answer.id])).status_code == 404
    client.force_login(make_user(Role.VIEWER, agents=[Agent.objects.create(name="another-agent")]))
    url = reverse("training:sample_episode", args=[sampled_episode.job_id, sampled_episode.id])
    assert client.get(url).status_code == 404
