"""What the two common OpenAI instrumentations really export, read by the OTLP receiver.

The fixtures in tests/fixtures/otlp/ were recorded from the packages themselves
(`capture.py` there): the `openai` client, instrumented, asked a stub twice in one `agent` span
(a call to `find_order`, its result, the answer), the model answering as `support-bot:v2`.
`openai-v2.json`: opentelemetry-instrumentation-openai-v2 with content capture `span_only`;
`openai-v2-events.json`: the same with `event_only` (the messages in log events);
`openinference.json`: openinference-instrumentation-openai.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import OtlpSpan, Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.parsers.otlp import parse
from flywheel.ingest.services import IngestOptions, served_call_ingest
from tests.conftest import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "otlp"
CONVERSATION = [
    ("system", "You are the support bot.", "", None),
    ("user", "Where is order 17?", "", None),
    ("tool_call", "", "find_order", {"order": 17}),
    ("tool_result", "shipped on May 2", "", None),
    ("assistant", "Order 17 ships today.", "", None),
]


def recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def spans(export: dict[str, Any]) -> list[dict[str, Any]]:
    return [span for rs in export["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


@pytest.fixture
def token(make_user) -> str:
    return api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]


def post(client, token: str, body: Any, signal: str = "traces", content_type: str = "application/json") -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.post(reverse(f"otlp_{signal}"), data, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")


def steps_of(trajectory: Trajectory) -> list[tuple[str, str, str, Any]]:
    steps = trajectory.steps.order_by("index").values_list("kind", "text", "tool_name", "tool_arguments")
    return [(kind, text, tool if kind == "tool_call" else "", arguments) for kind, text, tool, arguments in steps]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["openai-v2", "openinference"])
def test_each_instrumentation_s_spans_become_the_conversation_tagged_with_the_answering_version(client, token, name):
    response = post(client, token, recorded(name)["traces"])
    assert response.status_code == 200 and response.json() == {}
    trajectory = Trajectory.objects.get()
    assert steps_of(trajectory) == CONVERSATION
    assert (trajectory.agent.name, trajectory.model_version) == ("support-bot", "support-bot:v2")
    assert (trajectory.input_tokens, trajectory.output_tokens) == (70, 12)
    assert trajectory.metadata["response_ids"] == ["chatcmpl-1", "chatcmpl-2"]
    assert "response_id" not in trajectory.metadata  # two calls: an episode, not one call
    assert trajectory.steps.get(kind="tool_result").tool_call_id == "call_1"
    assert trajectory.steps.get(kind="assistant").latency_ms is not None


@pytest.mark.django_db
def test_openinference_spans_bring_the_tools_offered_and_keep_what_nothing_reads(client, token):
    post(client, token, recorded("openinference")["traces"])
    trajectory = Trajectory.objects.get()
    assert trajectory.agent.tool_names() == ["find_order"]
    call = trajectory.steps.get(kind="tool_call")
    assert call.metadata["llm.finish_reason"] == "tool_calls"
    assert not any(key.startswith(("llm.input_messages", "input.value", "output.value")) for key in call.metadata)


@pytest.mark.django_db
@pytest.mark.parametrize("logs_first", [True, False])
def test_event_only_messages_come_over_v1_logs_and_join_their_spans_in_either_order(client, token, logs_first):
    export = recorded("openai-v2-events")
    order = [("logs", export["logs"]), ("traces", export["traces"])]
    answers = [post(client, token, body, signal) for signal, body in (order if logs_first else order[::-1])]
    assert all(answer.status_code == 200 for answer in answers)
    trajectory = Trajectory.objects.get()
    assert steps_of(trajectory) == CONVERSATION
    assert trajectory.model_version == "support-bot:v2"
    if not logs_first:  # the spans came alone: reported, kept, and used once their messages came
        assert "content capture" in answers[0].json()["partialSuccess"]["errorMessage"]
    assert answers[-1].json() == {}
    # The answer's latency is its span's (an event alone has none): the event was joined to its span.
    [answer_span] = [span for span in spans(export["traces"]) if "chatcmpl-2" in json.dumps(span)]
    duration_ms = (int(answer_span["endTimeUnixNano"]) - int(answer_span["startTimeUnixNano"])) // 1_000_000
    assert trajectory.steps.get(kind="assistant").latency_ms == duration_ms > 0


@pytest.mark.django_db
def test_a_logs_export_in_protobuf_is_answered_in_protobuf(client, token):
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
        ExportLogsServiceResponse,
    )

    logs = recorded("openai-v2-events")["logs"]
    plain = copy.deepcopy(logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0])
    plain.pop("eventName")
    plain["body"] = {"stringValue": "GET /health 200"}
    logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"].append(plain)
    body = ParseDict(logs, ExportLogsServiceRequest()).SerializeToString()
    response = post(client, token, body, "logs", "application/x-protobuf")
    answer = ExportLogsServiceResponse.FromString(response.content)
    assert response.status_code == 200 and answer.partial_success.rejected_log_records == 1
    assert "not the GenAI event" in answer.partial_success.error_message
    assert steps_of(Trajectory.objects.get()) == CONVERSATION


@pytest.mark.django_db
def test_chat_spans_without_their_messages_are_reported_and_logged_not_dropped_silently(client, token, caplog):
    export = recorded("openai-v2")["traces"]
    for span in spans(export):
        span["attributes"] = [a for a in span.get("attributes", []) if "messages" not in a["key"]]
    with caplog.at_level(logging.WARNING, logger="flywheel.ingest.otlp"):
        response = post(client, token, export)
    partial = response.json()["partialSuccess"]
    assert (
        partial["rejectedSpans"] == 3
        and "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in partial["errorMessage"]
    )
    assert "3 in traces not assembled" in caplog.text
    assert not Trajectory.objects.exists() and OtlpSpan.objects.count() == 3  # kept for messages still to come


def parsed(export: dict[str, Any], service: str | None) -> Any:
    """The trace of a recorded export, parsed, with its resource's service.name changed (None: unset)."""
    resource = json.loads(json.dumps(export["resourceSpans"][0].get("resource", {})))
    attributes = [a for a in resource.get("attributes", []) if a["key"] != "service.name"]
    if service is not None:
        attributes.append({"key": "service.name", "value": {"stringValue": service}})
    from flywheel.ingest.otlp import export_from_json

    export = {"resourceSpans": [{**rs, "resource": {"attributes": attributes}} for rs in export["resourceSpans"]]}
    checked = export_from_json(export).spans
    return parse({"trace_id": checked[0]["trace_id"], "resource": checked[0]["resource"], "spans": checked},
                 FieldMapping())  # fmt: skip


@pytest.mark.parametrize("name", ["openai-v2", "openinference"])
def test_the_version_tag_is_the_answer_s_model_only_when_it_names_a_version_of_the_agent(name):
    export = recorded(name)["traces"]
    unnamed = parsed(export, "unknown_service")  # what the SDK calls a service nobody named
    assert (unnamed.agent, unnamed.model_version) == ("support-bot", "support-bot:v2")
    other = parsed(export, "billing-bot")
    assert (other.agent, other.model_version) == ("billing-bot", "")


def openinference_span(**attributes: Any) -> dict[str, Any]:
    return {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331", "parent_span_id": "",
            "name": "x", "start_ns": 1, "end_ns": 2_000_001, "status_code": 0, "status_message": "",
            "resource": {"service.name": "oi-bot"}, "attributes": attributes}  # fmt: skip


def test_openinference_content_lists_tool_messages_and_tool_spans_are_read():
    llm = openinference_span(**{
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.contents.0.message_content.type": "text",
        "llm.input_messages.0.message.contents.0.message_content.text": "Refund order 9",
        "llm.input_messages.1.message.role": "assistant",
        "llm.input_messages.1.message.tool_calls.0.tool_call.id": "c9",
        "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "refund",
        "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"order": 9}',
        "llm.input_messages.10.message.role": "tool",
        "llm.input_messages.10.message.tool_call_id": "c9",
        "llm.input_messages.10.message.content": "refunded",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Done.",
        "output.value": "not json", "output.mime_type": "application/json",
    })  # fmt: skip
    tool = openinference_span(**{"openinference.span.kind": "TOOL", "tool.name": "notify", "tool.id": "c10",
                                 "input.value": '{"who": "jane"}', "output.value": "sent"})  # fmt: skip
    tool.update(span_id="c7ad6b7169203331", start_ns=3_000_000, end_ns=4_000_000)
    trajectory = parse({"trace_id": llm["trace_id"], "resource": llm["resource"], "spans": [llm, tool]}, FieldMapping())
    kinds = [(step.kind, step.text or step.tool_name) for step in trajectory.steps]
    # Index 10 comes after 1 (numeric order, not text order); a 2-digit index is not misread.
    assert kinds == [("user", "Refund order 9"), ("tool_call", "refund"), ("tool_result", "refunded"),
                     ("assistant", "Done."), ("tool_call", "notify"), ("tool_result", "sent")]  # fmt: skip
    assert trajectory.steps[4].tool_arguments == {"who": "jane"} and trajectory.steps[5].latency_ms == 1
    assert "response_ids" not in trajectory.metadata  # output.value was not JSON: no id, and no failure


def served_record(answer_id: str) -> dict[str, Any]:
    """The chat endpoint's record of the first recorded call (as `registry.traffic.served_record` makes it)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "find_order", "arguments": '{"order": 17}'}}
    messages = [{"role": "system", "content": "You are the support bot."},
                {"role": "user", "content": "Where is order 17?"},
                {"role": "assistant", "content": None, "tool_calls": [call]}]  # fmt: skip
    return {"id": answer_id, "agent": "support-bot", "model_version": "support-bot:v2", "messages": messages,
            "metadata": {"served": {"adapter_sha256": "abc"}}}  # fmt: skip


SERVED = IngestOptions(format="openai-chat", source="served")


def one_call(name: str) -> dict[str, Any]:
    """The recorded export cut to its first call alone: its own trace, as an un-nested client call is."""
    export = copy.deepcopy(recorded(name)["traces"])
    for rs in export["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            ss["spans"] = [span for span in ss["spans"] if "parentSpanId" in span][:1]
            for span in ss["spans"]:
                span.pop("parentSpanId")
    return export


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["openai-v2", "openinference"])
def test_one_call_reported_by_the_endpoint_and_by_its_trace_is_one_trajectory_either_way(client, token, name):
    assert served_call_ingest(record=served_record("chatcmpl-1"), options=SERVED).status == "stored"
    assert post(client, token, one_call(name)).json() == {}
    [served] = Trajectory.objects.all()
    assert (served.source, served.external_id, served.model_version) == ("served", "chatcmpl-1", "support-bot:v2")
    trace_id = served.metadata["otlp"]["trace_id"]
    assert served.metadata["served"] == {"adapter_sha256": "abc"} and len(trace_id) == 32

    Trajectory.objects.all().delete()
    OtlpSpan.objects.all().delete()
    post(client, token, one_call(name))
    traced = Trajectory.objects.get()
    assert (traced.source, traced.metadata["response_id"]) == ("otlp", "chatcmpl-1")
    assert served_call_ingest(record=served_record("chatcmpl-1"), options=SERVED).trajectory_id == traced.pk
    [merged] = Trajectory.objects.all()
    assert (merged.pk, merged.source, merged.external_id) == (traced.pk, "served", "chatcmpl-1")
    assert merged.metadata["otlp"]["trace_id"] == traced.external_id
    assert [step[0] for step in steps_of(merged)] == ["system", "user", "tool_call"]
    # Both again (a re-sent export, a second delivery of the record): still one.
    assert post(client, token, one_call(name)).json() == {}
    assert served_call_ingest(record=served_record("chatcmpl-1"), options=SERVED).status == "duplicate"
    assert Trajectory.objects.count() == 1


@pytest.mark.django_db
def test_a_trace_of_several_calls_is_an_episode_of_its_own_beside_the_calls_records(client, token):
    served_call_ingest(record=served_record("chatcmpl-1"), options=SERVED)
    post(client, token, recorded("openai-v2")["traces"])
    assert sorted(Trajectory.objects.values_list("source", flat=True)) == ["otlp", "served"]
    assert "otlp" not in Trajectory.objects.get(source="served").metadata


@pytest.mark.django_db
def test_a_call_of_another_agent_with_the_same_answer_id_is_not_merged(client, token):
    record = {**served_record("chatcmpl-1"), "agent": "billing-bot"}
    served_call_ingest(record=record, options=SERVED)
    post(client, token, one_call("openai-v2"))
    assert sorted(Trajectory.objects.values_list("agent__name", "source")) == [("billing-bot", "served"),
                                                                               ("support-bot", "otlp")]  # fmt: skip
