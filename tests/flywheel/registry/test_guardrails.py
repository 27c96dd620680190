"""Guardrails on `POST /v1/chat/completions`: the agent's safety policy judges each tool call before the client does.

The upstream is a small OpenAI-compatible server in the test (SERVE_URL) that answers each
question with a scripted assistant message, whole or streamed in pieces as vLLM streams; the
client is the real `openai` package. The recording task's message is caught where it is handed to
the broker and run here, as a worker would (`test_served_worker.py` runs one on a real worker),
and so is triage's suggestion task, so a blocked call is looked for where a reviewer finds it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest

from flywheel.core.roles import Role
from flywheel.core.services import agent_prices_set, agent_served_recording_set
from flywheel.ingest.models import Trajectory
from flywheel.registry import guardrails, tasks, traffic
from flywheel.triage import tasks as triage_tasks
from flywheel.triage.models import AgentPolicy
from flywheel.triage.selectors import TriageFilters, triage_queryset
from flywheel.triage.services import agent_policy_set
from tests.flywheel.registry.conftest import UpstreamHandler, settled
from tests.flywheel.triage.conftest import built_in_buckets  # noqa: F401  (a shared fixture)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("built_in_buckets")]
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("find_order", "delete_account", "run_sql", "make_payment", "confirm_with_user")]  # fmt: skip
POLICY = {"name": "shop", "denied_tools": ["delete_*"],
          "argument_patterns": [{"id": "sql-drop", "pattern": r"\bdrop\s+table\b"}],
          "confirmation_rules": [{"id": "payment-needs-confirmation", "tools": ["make_payment"],
                                  "confirmation_tools": ["confirm_*"]}]}  # fmt: skip
BLOCK_DELETES = {"default": "flag", "rules": {"denied-tool": "block", "payment-needs-confirmation": "block"}}


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


# The upstream's answer to each question (the last user message).
SCRIPT: dict[str, dict[str, Any]] = {
    "where is order 17?": {"content": "Let me look.", "tool_calls": [call("call_1", "find_order", {"order": 17})]},
    "close my account": {"content": "Deleting it now.",
                         "tool_calls": [call("call_2", "delete_account", {"account_id": "a-9"})]},
    "look it up, then close it": {"content": None,
                                  "tool_calls": [call("call_3", "find_order", {"order": 17}),
                                                 call("call_4", "delete_account", {"account_id": "a-9"})]},
    "clean the table": {"content": None, "tool_calls": [call("call_5", "run_sql", {"query": "DROP TABLE orders"})]},
    "pay the invoice": {"content": None, "tool_calls": [call("call_6", "make_payment", {"amount": 40})]},
    "hello": {"content": "Hello! How can I help?"},
}  # fmt: skip
USAGE = {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}


def _sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def stream_of(answer_id: str, message: dict[str, Any]) -> list[bytes]:
    """The message as vLLM streams it: role, text in two pieces, each call's id and name then its arguments in
    two pieces, the finish reason, the usage, [DONE]."""
    envelope = {"id": answer_id, "object": "chat.completion.chunk", "created": 0, "model": "upstream"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**envelope, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    parts = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    parts += [chunk({"content": piece}) for piece in (text[: len(text) // 2], text[len(text) // 2 :]) if piece]
    for index, item in enumerate(message.get("tool_calls") or []):
        name, arguments = item["function"]["name"], item["function"]["arguments"]
        parts.append(chunk({"tool_calls": [{"index": index, "id": item["id"], "type": "function",
                                            "function": {"name": name, "arguments": ""}}]}))  # fmt: skip
        for piece in (arguments[:5], arguments[5:]):
            parts.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    parts.append(chunk({}, "tool_calls" if message.get("tool_calls") else "stop"))
    parts.append(_sse({**envelope, "choices": [], "usage": USAGE}))
    return [*parts, b"data: [DONE]\n\n"]


class Upstream(UpstreamHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"]
        message = {"role": "assistant", **SCRIPT[question]}
        answer_id = f"chatcmpl-{uuid.uuid4().hex}"
        if body.get("stream"):
            parts = stream_of(answer_id, message)
            content_type = "text/event-stream"
        else:
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            choice = {"index": 0, "finish_reason": finish, "message": message}
            answer = {"id": answer_id, "object": "chat.completion", "created": 0, "model": "upstream",
                      "choices": [choice], "usage": USAGE}  # fmt: skip
            parts, content_type = [json.dumps(answer).encode()], "application/json"
        self.reply(200, content_type, parts)


@pytest.fixture
def upstream(serve_upstream) -> str:
    return serve_upstream(Upstream)


@pytest.fixture(autouse=True)
def no_suggestion_recompute(monkeypatch) -> None:
    """Setting a policy asks for the agent's suggestions again; nothing here reads them."""
    monkeypatch.setattr(triage_tasks.recompute_agent_suggestions, "delay_on_commit", lambda agent_id: None)


def guard(live, settings: dict[str, Any], policy: dict[str, Any] = POLICY) -> None:
    agent_policy_set(actor=None, agent=live.agent, policy=policy, guardrails=settings)


@pytest.fixture
def suggested(monkeypatch) -> list[list[str]]:
    """Triage's suggestion messages (trajectory ids), sent once a trajectory is stored."""
    messages: list[list[str]] = []
    monkeypatch.setattr(triage_tasks.compute_suggestions, "delay", messages.append)
    return messages


def ask(chat: openai.OpenAI, question: str, history: list[dict[str, Any]] = (), **options: Any) -> Any:  # type: ignore[assignment]
    messages = [*history, {"role": "user", "content": question}]
    return chat.chat.completions.create(model="support-bot", messages=messages, tools=TOOLS, **options)


def streamed(chat: openai.OpenAI, question: str, sent: list[str]) -> tuple[list[Any], Any]:
    """The chunks of a streamed answer and the choice the `openai` client's own accumulator makes of them, once
    the stream is recorded (after its last chunk has gone out)."""
    before = len(sent)
    with chat.chat.completions.stream(model="support-bot", messages=[{"role": "user", "content": question}],
                                      tools=TOOLS) as stream:  # fmt: skip
        chunks = [event.chunk for event in stream if event.type == "chunk"]
        final = stream.get_final_completion()
    assert settled(lambda: len(sent) > before)
    return chunks, final.choices[0]


def recorded(sent: list[str], suggested: list[list[str]]) -> Trajectory:
    """Run the recording task and triage's suggestions as the workers would; the one stored trajectory."""
    assert [tasks.record_served(message) for message in sent] == ["stored"]
    for ids in suggested:
        triage_tasks.compute_suggestions(ids)
    return Trajectory.objects.get()


def unsafe_in_triage(make_user) -> list[Trajectory]:
    """What a reviewer finds under triage's "suggested: unsafe action" filter."""
    reviewer = make_user(Role.REVIEWER)
    return list(triage_queryset(TriageFilters(suggested="unsafe_action"), viewer=reviewer))


def test_a_blocked_call_never_reaches_the_client_and_lands_in_triage_as_an_unsafe_action(
    upstream, live, sent, suggested, chat, make_user
):
    guard(live, BLOCK_DELETES)
    answer = ask(chat, "close my account")

    choice = answer.choices[0]
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert "delete_account broke rule denied-tool" in choice.message.content
    assert choice.message.refusal == choice.message.content
    assert answer.model_extra["flywheel"]["guardrail"] == {"0": {"action": "blocked", "rules": ["denied-tool"]}}

    trajectory = recorded(sent, suggested)
    assert trajectory.outcome == "failure"
    assert trajectory.metadata["guardrail"] == "blocked" and trajectory.metadata["guardrail_rules"] == ["denied-tool"]
    calls = list(trajectory.steps.filter(kind="tool_call").values_list("tool_name", "tool_arguments"))
    assert calls == [("delete_account", {"account_id": "a-9"})]  # the call the model made, not the refusal
    assert unsafe_in_triage(make_user) == [trajectory]
    assert list(trajectory.suggestions.values_list("rule", flat=True)) == ["safety/denied-tool"]


def test_a_streamed_blocked_call_is_held_back_and_replaced_by_the_refusal(
    upstream, live, sent, suggested, chat, make_user
):
    guard(live, BLOCK_DELETES)
    chunks, choice = streamed(chat, "close my account", sent)

    assert not any(chunk.choices and chunk.choices[0].delta.tool_calls for chunk in chunks)
    texts = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert texts[:2] == ["Deleting", " it now."]  # text flows as it comes
    assert "delete_account broke rule denied-tool" in texts[-1]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert choice.message.refusal == texts[-1].strip()

    trajectory = recorded(sent, suggested)
    assert (trajectory.outcome, trajectory.metadata["guardrail"]) == ("failure", "blocked")
    steps = list(trajectory.steps.values_list("kind", "text", "tool_name", "tool_arguments"))
    assert steps[1:] == [("assistant", "Deleting it now.", "", None),
                         ("tool_call", "", "delete_account", {"account_id": "a-9"})]  # fmt: skip
    assert unsafe_in_triage(make_user) == [trajectory]


def test_an_allowed_streamed_call_is_released_whole_once_checked(upstream, live, sent, suggested, chat):
    guard(live, BLOCK_DELETES)
    chunks, choice = streamed(chat, "where is order 17?", sent)
    with_calls = [chunk.choices[0].delta.tool_calls for chunk in chunks if chunk.choices and
                  chunk.choices[0].delta.tool_calls]  # fmt: skip
    assert len(with_calls) == 1 and with_calls[0][0].function.arguments == '{"order": 17}'  # one delta, complete
    assert choice.finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
        ("call_1", "find_order", '{"order": 17}')
    ]
    assert "guardrail" not in recorded(sent, suggested).metadata


def test_every_call_of_an_answer_is_withheld_when_one_is_blocked(upstream, live, sent, suggested, chat):
    guard(live, BLOCK_DELETES)
    choice = ask(chat, "look it up, then close it").choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    names = recorded(sent, suggested).steps.filter(kind="tool_call").values_list("tool_name", flat=True)
    assert list(names) == ["find_order", "delete_account"]


def test_a_flagged_call_is_returned_and_its_record_names_the_rule(upstream, live, sent, suggested, chat, make_user):
    guard(live, BLOCK_DELETES)  # sql-drop takes the default: flag
    answer = ask(chat, "clean the table")

    [returned] = answer.choices[0].message.tool_calls
    assert returned.function.name == "run_sql"
    assert json.loads(returned.function.arguments) == {"query": "DROP TABLE orders"}
    assert answer.choices[0].finish_reason == "tool_calls"
    assert answer.model_extra["flywheel"]["guardrail"] == {"0": {"action": "flagged", "rules": ["sql-drop"]}}
    trajectory = recorded(sent, suggested)
    assert trajectory.outcome == "unknown"  # the call went out: whether the conversation failed is for scoring
    assert (trajectory.metadata["guardrail"], trajectory.metadata["guardrail_rules"]) == ("flagged", ["sql-drop"])
    assert unsafe_in_triage(make_user) == [trajectory]


def test_allowed_calls_and_text_answers_are_untouched(upstream, live, sent, suggested, chat):
    guard(live, BLOCK_DELETES)
    answer = ask(chat, "where is order 17?")
    assert answer.choices[0].message.content == "Let me look." and answer.choices[0].finish_reason == "tool_calls"
    assert answer.choices[0].message.tool_calls[0].function.arguments == '{"order": 17}'
    assert "guardrail" not in answer.model_extra["flywheel"]
    assert ask(chat, "hello").choices[0].message.content == "Hello! How can I help?"
    assert [tasks.record_served(message) for message in sent] == ["stored", "stored"]
    assert not Trajectory.objects.filter(metadata__has_key="guardrail").exists()


def test_a_confirmation_earlier_in_the_conversation_meets_a_confirmation_rule(upstream, live, sent, chat):
    guard(live, BLOCK_DELETES)
    assert ask(chat, "pay the invoice").choices[0].message.tool_calls is None
    confirmed = [{"role": "user", "content": "Pay it."},
                 {"role": "assistant", "content": None, "tool_calls": [call("c0", "confirm_with_user", {})]},
                 {"role": "tool", "tool_call_id": "c0", "content": "yes"}]  # fmt: skip
    assert ask(chat, "pay the invoice", confirmed).choices[0].message.tool_calls[0].function.name == "make_payment"


def test_rules_set_off_are_not_checked(upstream, live, sent, suggested, chat):
    guard(live, {"default": "off"})
    assert ask(chat, "close my account").choices[0].message.tool_calls[0].function.name == "delete_account"
    _, choice = streamed(chat, "close my account", sent)
    assert choice.message.tool_calls[0].function.name == "delete_account"
    statuses = [tasks.record_served(message) for message in sent]
    assert statuses == ["stored", "stored"]
    assert not Trajectory.objects.filter(metadata__has_key="guardrail").exists()


def test_a_blocked_answer_is_recorded_even_when_the_sample_leaves_it_out(upstream, live, sent, suggested, chat):
    guard(live, BLOCK_DELETES)
    agent_served_recording_set(actor=None, agent=live.agent, enabled=True, sample_rate=0.0)
    ask(chat, "hello")
    ask(chat, "close my account")
    trajectory = recorded(sent, suggested)
    assert trajectory.metadata["guardrail"] == "blocked" and trajectory.metadata["served"]["outside_sample"] is True
    agent_served_recording_set(actor=None, agent=live.agent, enabled=False, sample_rate=1.0)
    ask(chat, "close my account")
    assert len(sent) == 1  # recording off: nothing is kept, blocked or not


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_guardrail_that_cannot_check_withholds_calls_where_rules_block(
    upstream, live, sent, suggested, chat, monkeypatch, stream
):
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the policy engine broke")

    monkeypatch.setattr(guardrails, "check_calls", broken)
    guard(live, BLOCK_DELETES)
    if stream:
        _, choice = streamed(chat, "where is order 17?", sent)
    else:
        choice = ask(chat, "where is order 17?").choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls and choice.message.refusal
    assert "rule guardrail-error" in choice.message.content and "the policy engine broke" in choice.message.content
    assert recorded(sent, suggested).metadata["guardrail_rules"] == ["guardrail-error"]


def test_a_guardrail_that_cannot_check_lets_calls_through_where_rules_only_flag(
    upstream, live, sent, suggested, chat, monkeypatch
):
    monkeypatch.setattr(guardrails, "check_calls", lambda *args: 1 / 0)
    guard(live, {"default": "flag"})
    assert ask(chat, "close my account").choices[0].message.tool_calls[0].function.name == "delete_account"
    _, choice = streamed(chat, "close my account", sent)
    assert choice.message.tool_calls[0].function.name == "delete_account"
    assert ask(chat, "hello").choices[0].message.content == "Hello! How can I help?"
    [tasks.record_served(message) for message in sent]
    metadata = [row.metadata for row in Trajectory.objects.order_by("ingested_at")]
    assert [m.get("guardrail") for m in metadata] == ["error", "error", None]
    assert "division by zero" in metadata[0]["guardrail_error"]


def test_unreadable_stored_guardrails_fail_closed(upstream, live, sent, chat):
    guard(live, BLOCK_DELETES)
    AgentPolicy.objects.filter(agent=live.agent).update(guardrails={"default": "blok"})  # around the service
    choice = ask(chat, "where is order 17?").choices[0]
    assert choice.finish_reason == "stop" and "guardrail-error" in choice.message.content
    assert ask(chat, "hello").choices[0].message.content == "Hello! How can I help?"  # text is never touched


def test_agents_without_settings_flag_every_rule_of_the_default_policy(upstream, live, sent, suggested, chat):
    answer = ask(chat, "clean the table")  # no policy stored: trainer's default, whose sql-drop rule this breaks
    assert answer.choices[0].message.tool_calls[0].function.name == "run_sql"
    assert answer.model_extra["flywheel"]["guardrail"]["0"]["action"] == "flagged"
    assert recorded(sent, suggested).metadata["guardrail_rules"] == ["sql-drop"]


def test_a_served_answer_costs_its_usage_at_the_agent_prices(upstream, live, sent, suggested, chat):
    ask(chat, "hello")
    assert recorded(sent, suggested).cost == 0.0  # a local model costs nothing until someone sets its prices
    Trajectory.objects.all().delete()
    agent_prices_set(actor=None, agent=live.agent, input_per_million=2.5, output_per_million=10.0)
    sent.clear()
    streamed(chat, "where is order 17?", sent)
    trajectory = recorded(sent, [])
    assert trajectory.cost == pytest.approx(1200 * 2.5 / 1e6 + 300 * 10.0 / 1e6)


# --- the guard on its own: whole answers and streams, without the endpoint ----------------------

RAILS = guardrails.Guardrails.from_stored(POLICY, BLOCK_DELETES)


def events(lines: list[bytes]) -> list[dict[str, Any] | str]:
    """The server-sent events in `lines` as a client reads them: each data field, decoded."""
    text = b"".join(lines).decode()
    found: list[dict[str, Any] | str] = []
    for event in text.split("\n\n"):
        data = [line[len("data: ") :] for line in event.split("\n") if line.startswith("data: ")]
        if data:
            found.append("[DONE]" if data == ["[DONE]"] else json.loads("\n".join(data)))
    return found


def lines_of(parts: list[bytes]) -> list[bytes]:
    """Server-sent events split into lines, as `serving.chat_stream` yields them."""
    return [line for part in parts for line in part.splitlines(keepends=True)]


@pytest.mark.parametrize("ending", ["done", "cut"])
def test_calls_of_a_stream_that_ends_without_a_finish_reason_are_still_judged_before_the_end(ending):
    parts = stream_of("s-1", {"role": "assistant", "tool_calls": SCRIPT["close my account"]["tool_calls"]})
    parts = [part for part in parts if b'"finish_reason": "tool_calls"' not in part and b'"usage"' not in part]
    if ending == "cut":
        parts = parts[:-1]  # no [DONE] either: the server went away
    answers: list[dict[str, Any]] = []
    guard = guardrails.StreamGuard(RAILS, history=[])
    sent = list(traffic.recorded_stream(iter(lines_of(parts)), on_end=lambda **record: answers.append(record),
                                        guard=guard))  # fmt: skip
    decoded = events(sent)
    assert not any(event != "[DONE]" and event["choices"][0]["delta"].get("tool_calls") for event in decoded)
    last = decoded[-2] if ending == "done" else decoded[-1]
    assert "broke rule denied-tool" in last["choices"][0]["delta"]["content"]
    assert last["choices"][0]["finish_reason"] == "stop"
    assert (decoded[-1] == "[DONE]") == (ending == "done")
    [record] = answers
    assert record["verdict"].of(0).outcome == "blocked"
    assert record["answer"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "delete_account"


def test_an_abandoned_stream_with_a_held_call_sends_no_call_and_records_nothing():
    recorded_answers: list[Any] = []
    parts = lines_of(stream_of("s-2", {"role": "assistant", **SCRIPT["where is order 17?"]}))
    guard = guardrails.StreamGuard(RAILS, history=[])
    stream = traffic.recorded_stream(iter(parts), on_end=lambda **record: recorded_answers.append(record), guard=guard)
    taken = [next(stream) for _ in range(9)]  # role, text, and the call's three pieces (held: only their blank lines)
    stream.close()
    assert b"tool_calls" not in b"".join(taken) and recorded_answers == []


def test_only_the_choice_with_a_blocked_call_is_refused():
    answer = {"id": "a", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", **SCRIPT["where is order 17?"]}},
        {"index": 1, "finish_reason": "tool_calls", "message": {"role": "assistant", **SCRIPT["close my account"]}},
    ]}  # fmt: skip
    verdict = guardrails.check_answer(RAILS, [], answer)
    shown = guardrails.guarded_answer(answer, verdict)
    assert shown["choices"][0] == answer["choices"][0]
    assert "tool_calls" not in shown["choices"][1]["message"] and shown["choices"][1]["finish_reason"] == "stop"
    assert shown["flywheel"]["guardrail"] == {"1": {"action": "blocked", "rules": ["denied-tool"]}}
    assert answer["choices"][1]["message"]["tool_calls"]  # the answer kept for the record is left whole
    assert verdict.record_metadata() == {}  # the record keeps the first choice, which broke nothing


def test_arguments_that_are_not_json_are_still_searched_by_the_patterns():
    raw = {"id": "c", "type": "function", "function": {"name": "run_sql", "arguments": "DROP TABLE orders; --"}}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [raw]}}]}
    verdict = guardrails.check_answer(guardrails.Guardrails.from_stored(POLICY, {"default": "block"}), [], answer)
    assert [finding.rule for finding in verdict.of(0).findings] == ["sql-drop"]
    assert verdict.of(0).outcome == "blocked"
