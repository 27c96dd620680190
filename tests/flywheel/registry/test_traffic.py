"""Served traffic is recorded: each answer of `POST /v1/chat/completions` becomes one trajectory of its agent.

The upstream here is a small OpenAI-compatible server in the test (SERVE_URL), which streams, so
whole and streamed answers go through the app's real view and the real `openai` client. The
recording task's message (the outbox row's id) is caught where it is handed to the broker and
run in this process, as a worker would run it; `test_served_worker.py` runs it on a real worker.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import openai
import pytest
from django.db import OperationalError as OperationalDatabaseError
from kombu.exceptions import OperationalError

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.core.services import agent_served_recording_set, api_token_create
from flywheel.ingest.models import Step, Trajectory
from flywheel.registry import services, tasks, traffic
from flywheel.registry.models import ServedExchange
from flywheel.registry.services import served_store
from tests.flywheel.registry.conftest import UpstreamHandler, settled

pytestmark = [pytest.mark.django_db(transaction=True)]
QUESTION = [{"role": "system", "content": "You are the support bot."},
            {"role": "user", "content": "Where is order 17? Mail me at jane@example.com"}]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "find_order", "parameters": {"type": "object"}}}]
ANSWER_ID = "chatcmpl-whole-1"
STREAM_ID = "chatcmpl-stream-1"


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    chunk = {"id": STREAM_ID, "object": "chat.completion.chunk", "created": 0, "model": "upstream",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}  # fmt: skip
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


STREAM = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "Let me "}),
    _chunk({"content": "look."}),
    _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "find_order", "arguments": '{"order"'}}]}),  # fmt: skip
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 17}"}}]}, finish="tool_calls"),
    b"data: " + json.dumps({"id": STREAM_ID, "object": "chat.completion.chunk", "choices": [],
                            "usage": {"prompt_tokens": 30, "completion_tokens": 9}}).encode() + b"\n\n",  # fmt: skip
    b"data: [DONE]\n\n",
]


class Upstream(UpstreamHandler):
    """Answers chat completions as vLLM would: whole, or streamed as server-sent events; "refuse" gets a 400."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["messages"][-1]["content"] == "refuse":
            return self.reply(400, "application/json", [b'{"error": {"message": "no", "type": "bad_request"}}'])
        if body.get("stream"):
            return self.reply(200, "text/event-stream", STREAM)
        answer = {"id": ANSWER_ID, "object": "chat.completion", "created": 0, "model": "upstream",
                  "choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Order 17 ships today."}}],
                  "usage": {"prompt_tokens": 21, "completion_tokens": 5, "total_tokens": 26}}  # fmt: skip
        return self.reply(200, "application/json", [json.dumps(answer).encode()])


@pytest.fixture
def upstream(serve_upstream) -> str:
    return serve_upstream(Upstream)


def ask(chat: openai.OpenAI, **options: Any) -> Any:
    return chat.chat.completions.create(model="support-bot", messages=QUESTION, tools=TOOLS, **options)


def run(messages: list[str]) -> list[str]:
    """Run each message's task here, as a worker would: the stored, duplicate, rejected or gone status of each."""
    return [tasks.record_served(message) for message in messages]


def test_a_whole_answer_becomes_one_trajectory_tagged_with_the_version_that_answered(upstream, live, sent, chat):
    answer = ask(chat)
    assert answer.choices[0].message.content == "Order 17 ships today."
    assert run(sent) == ["stored"]

    trajectory = Trajectory.objects.get()
    assert (trajectory.agent, trajectory.source, trajectory.external_id) == (live.agent, "served", ANSWER_ID)
    assert trajectory.model_version == "support-bot:v1" == answer.model
    assert trajectory.metadata["served"]["adapter_sha256"] == live.adapter_sha256
    assert (trajectory.input_tokens, trajectory.output_tokens) == (21, 5)
    assert trajectory.duration_ms is not None and trajectory.duration_ms >= 0
    assert trajectory.outcome == "unknown"
    steps = list(trajectory.steps.values_list("kind", "text"))
    assert steps == [("system", QUESTION[0]["content"]), ("user", QUESTION[1]["content"]),
                     ("assistant", "Order 17 ships today.")]  # fmt: skip
    assert trajectory.final_result == "Order 17 ships today."
    assert Agent.objects.get(pk=live.agent.pk).tool_names() == ["find_order"]  # the request's tools


def test_a_whole_answer_reaches_the_client_before_its_recording_runs(
    upstream, live, sent, live_server, make_user, monkeypatch, answers_in_flight
):
    began, release = threading.Event(), threading.Event()
    record = services.served_record_later

    def held(**kwargs: Any) -> bool:
        began.set()
        release.wait(5)
        return record(**kwargs)

    monkeypatch.setattr(services, "served_record_later", held)
    token = api_token_create(user=make_user(Role.VIEWER), name="impatient")[1]
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=30)

    assert ask(client).choices[0].message.content == "Order 17 ships today."  # while the recording is held
    assert began.wait(5) and sent == []
    release.set()
    answers_in_flight.settle()
    assert run(sent) == ["stored"]


def test_running_the_task_again_stores_nothing_twice(upstream, live, sent, chat):
    ask(chat)
    assert run(sent + sent) == ["stored", "gone"]
    assert Trajectory.objects.count() == 1 and Step.objects.count() == 3 and not ServedExchange.objects.exists()


def test_an_exchange_kept_twice_with_one_answer_id_is_stored_once(upstream, live, sent, chat):
    ask(chat)
    ask(chat)  # the upstream answers with the same id: the same answer, delivered to us twice
    assert run(sent) == ["stored", "duplicate"]
    assert Trajectory.objects.count() == 1 and not ServedExchange.objects.exists()


def test_a_streamed_answer_is_recorded_once_whole_with_its_tool_call(upstream, live, sent, chat):
    chunks = list(ask(chat, stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Let me look." and {chunk.model for chunk in chunks} == {"support-bot:v1"}
    assert settled(lambda: len(sent) == 1)  # once the stream ended, not per chunk
    time.sleep(0.5)
    assert len(sent) == 1
    assert run(sent) == ["stored"]

    trajectory = Trajectory.objects.get()
    assert trajectory.external_id == STREAM_ID and trajectory.model_version == "support-bot:v1"
    assert (trajectory.input_tokens, trajectory.output_tokens) == (30, 9)
    steps = list(trajectory.steps.values_list("kind", "text", "tool_name", "tool_arguments", "tool_call_id"))
    assert steps[2:] == [("assistant", "Let me look.", "", None, ""),
                         ("tool_call", "", "find_order", {"order": 17}, "call_1")]  # fmt: skip


def test_an_agent_with_recording_off_records_nothing(upstream, live, sent, chat):
    agent_served_recording_set(actor=None, agent=live.agent, enabled=False, sample_rate=1.0)
    assert ask(chat).choices[0].message.content
    assert list(ask(chat, stream=True))
    time.sleep(0.5)  # a stream is recorded after its last chunk: give it the time
    assert sent == [] and not ServedExchange.objects.exists()


def test_a_sample_rate_of_zero_records_nothing_and_a_half_records_some(upstream, live, sent, chat):
    agent_served_recording_set(actor=None, agent=live.agent, enabled=True, sample_rate=0.0)
    for _ in range(5):
        ask(chat)
    assert sent == [] and not ServedExchange.objects.exists()
    agent_served_recording_set(actor=None, agent=live.agent, enabled=True, sample_rate=0.5)
    for _ in range(40):
        ask(chat)
    assert 5 <= len(sent) <= 35  # 20 expected; outside this, p < 1e-4


def test_a_broker_that_refuses_the_message_fails_no_answer_and_the_sweeper_sends_it_later(
    upstream, live, monkeypatch, chat
):
    def down(exchange_id: str) -> None:
        raise OperationalError("Error 111 connecting to redis: Connection refused.")

    monkeypatch.setattr(tasks.record_served, "delay", down)
    assert ask(chat).choices[0].message.content == "Order 17 ships today."
    assert "".join(c.choices[0].delta.content or "" for c in ask(chat, stream=True) if c.choices) == "Let me look."
    assert settled(lambda: ServedExchange.objects.filter(dispatched_at=None).count() == 2)
    assert not Trajectory.objects.exists()

    resent: list[str] = []
    monkeypatch.setattr(tasks.record_served, "delay", resent.append)  # the broker is back
    assert services.served_sweep() == []  # kept a moment ago: its request may still be handing it over
    assert services.served_sweep(grace=timedelta(0)) and len(resent) == 2
    assert sorted(run(resent)) == ["stored", "stored"]
    assert set(Trajectory.objects.values_list("external_id", flat=True)) == {ANSWER_ID, STREAM_ID}
    assert services.served_sweep(grace=timedelta(0)) == []


def test_the_sweeper_leaves_a_fresh_message_alone_and_resends_an_old_one(upstream, live, sent, chat):
    ask(chat)
    assert services.served_sweep() == []  # sent a moment ago: its worker has it
    assert services.served_sweep(resend_after=timedelta(0)) == [ServedExchange.objects.get().pk]
    assert run(sent) == ["stored", "gone"]


def test_a_database_that_refuses_the_outbox_row_fails_no_answer(upstream, live, sent, chat, monkeypatch):
    def refuse(**kwargs: Any) -> None:
        raise OperationalDatabaseError("the database went away")

    monkeypatch.setattr(ServedExchange.objects, "create", refuse)
    assert ask(chat).choices[0].message.content == "Order 17 ships today."
    assert sent == []


def test_a_store_that_fails_on_the_database_is_retried_and_stores_once(upstream, live, sent, chat, monkeypatch):
    assert ask(chat).choices[0].message.content  # the client has its answer; the write is the task's
    calls: list[int] = []

    def flaky(**kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalDatabaseError("the database went away")
        return served_store(**kwargs)

    monkeypatch.setattr(tasks, "served_store", flaky)
    result = tasks.record_served.apply(args=[sent[0]])  # in this process, with the task's own retry policy
    assert result.get() == "stored" and len(calls) == 2
    assert Trajectory.objects.count() == 1


def test_refused_requests_are_not_recorded(upstream, live, sent, chat):
    with pytest.raises(openai.BadRequestError):
        chat.chat.completions.create(model="support-bot", messages=[{"role": "user", "content": "refuse"}])
    with pytest.raises(openai.BadRequestError):
        list(chat.chat.completions.create(model="support-bot", messages=[{"role": "user", "content": "refuse"}],
                                          stream=True))  # fmt: skip
    with pytest.raises(openai.APIStatusError):
        chat.chat.completions.create(model="support-bot:v9", messages=QUESTION)  # not the live version: 409
    assert sent == [] and not ServedExchange.objects.exists()


def test_the_record_is_redacted_as_ingest_redacts(upstream, live, sent, chat, settings):
    settings.INGEST_REDACT_DEFAULT = ["email"]
    ask(chat)
    run(sent)
    user = Trajectory.objects.get().steps.get(kind="user")
    assert "jane@example.com" not in user.text and "[REDACTED:email]" in user.text


def test_an_abandoned_stream_is_not_recorded():
    recorded: list[dict[str, Any]] = []
    stream = traffic.recorded_stream(iter(STREAM), on_end=lambda answer: recorded.append(answer))
    next(stream), next(stream)
    stream.close()
    assert recorded == []
