"""OTLP/HTTP traces: the real OpenTelemetry SDK exporting GenAI spans to the live test server."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from django.utils import timezone

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import Trajectory

USER_TURN = [{"role": "user", "parts": [{"type": "text", "content": "Cancel my order 1234, I'm jane@example.com"}]}]
CALL = {"type": "tool_call", "id": "call_1", "name": "cancel_order", "arguments": {"order_id": "1234"}}


def export_with_sdk(endpoint: str, token: str) -> str:
    """Three GenAI spans and a plain one, exported one by one as SimpleSpanProcessor does; the trace id."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    resource = Resource.create({"service.name": "support-bot", "flywheel.model_version": "support-bot:v3"})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=endpoint, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("support-bot")
    with tracer.start_as_current_span("handle request") as root:
        with tracer.start_as_current_span("chat gpt-4o") as chat:
            chat.set_attributes({
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You are a shop's agent."}]),
                "gen_ai.input.messages": json.dumps(USER_TURN),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [CALL]}]),
                "gen_ai.usage.input_tokens": 120,
                "gen_ai.usage.output_tokens": 18,
                "app.tenant": "acme",
            })  # fmt: skip
        with tracer.start_as_current_span("execute_tool cancel_order") as tool:
            tool.set_attributes({
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "cancel_order",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": json.dumps({"order_id": "1234"}),
                "gen_ai.tool.call.result": "Error: order 1234 has shipped",
            })  # fmt: skip
            tool.set_status(Status(StatusCode.ERROR, "order has shipped"))
        with tracer.start_as_current_span("chat gpt-4o") as chat:
            history = [
                *USER_TURN,
                {"role": "assistant", "parts": [CALL]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "Error"}]},
            ]
            chat.set_attributes({
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "Sorry, it has shipped already."}]}]),
            })  # fmt: skip
        root.set_attribute("flywheel.outcome", "failure")
        trace_id = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


@pytest.mark.django_db(transaction=True)
def test_spans_from_the_opentelemetry_sdk_become_one_trajectory(live_server, make_user):
    token = api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]
    trace_id = export_with_sdk(f"{live_server.url}/v1/traces", token)
    trajectory = Trajectory.objects.get(source="otlp", external_id=trace_id)
    steps = list(trajectory.steps.order_by("index").values_list("kind", "tool_name", "text"))
    assert [kind for kind, _, _ in steps] == ["system", "user", "tool_call", "tool_result", "assistant"]
    assert steps[2][1] == steps[3][1] == "cancel_order" and steps[3][2] == "Error: order 1234 has shipped"
    assert trajectory.steps.get(kind="tool_call").tool_arguments == {"order_id": "1234"}
    assert trajectory.steps.get(kind="tool_result").is_error
    assert (trajectory.agent.name, trajectory.model_version, trajectory.outcome) == (
        "support-bot",
        "support-bot:v3",
        "failure",
    )
    assert trajectory.input_tokens == 120 and trajectory.steps.get(kind="tool_call").metadata == {"app.tenant": "acme"}
    assert trajectory.metadata["other_spans"][0]["name"] == "handle request"
    assert Trajectory.objects.count() == 1  # four exports, one trajectory, refreshed in place


def otlp_json(trace_id: str, span_id: str, attributes: dict) -> dict:
    values = [{"key": key, "value": {"stringValue": value}} for key, value in attributes.items()]
    span = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "chat",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000500000000",
        "attributes": values,
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "json-bot"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}


@pytest.mark.django_db
def test_otlp_json_is_accepted_and_a_trace_without_genai_spans_is_a_partial_success(client, make_user):
    token = api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    good = otlp_json("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(USER_TURN),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Hi"}]}]),
    })  # fmt: skip
    response = client.post(reverse("otlp_traces"), json.dumps(good), content_type="application/json", **headers)
    assert response.status_code == 200 and response.json() == {}
    assert Trajectory.objects.get().agent.name == "json-bot"
    plain = otlp_json("1af7651916cd43dd8448eb211c80319c", "c7ad6b7169203331", {"http.method": "GET"})
    response = client.post(reverse("otlp_traces"), json.dumps(plain), content_type="application/json", **headers)
    assert response.json()["partialSuccess"]["rejectedSpans"] == 1
    assert "no GenAI spans" in response.json()["partialSuccess"]["errorMessage"]


@pytest.mark.django_db
def test_the_receiver_checks_the_token_and_the_permission(client, make_user):
    assert client.post(reverse("otlp_traces"), "{}", content_type="application/json").status_code == 401
    token = api_token_create(user=make_user(Role.VIEWER), name="x")[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.post(reverse("otlp_traces"), "{}", content_type="application/json", **headers).status_code == 403


@pytest.mark.django_db
def test_a_body_that_is_not_otlp_is_a_400(client, make_user):
    token = api_token_create(user=make_user(Role.REVIEWER), name="x")[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    bad = client.post(reverse("otlp_traces"), b"\x00garbage", content_type="application/x-protobuf", **headers)
    assert bad.status_code == 400 and "ExportTraceServiceRequest" in bad.json()["error"]


def chat_span(trace_id: str, span_id: str, text: str = "Hi", **changes) -> dict:
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(USER_TURN),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]),
    }
    span = otlp_json(trace_id, span_id, attributes)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    return {**span, **changes}


def export(*spans: dict) -> dict:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "json-bot"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": list(spans)}]}]}


def nested_value(json_levels: int) -> dict:
    """An AnyValue whose JSON nests `json_levels` deep (each kvlist level is four JSON levels)."""
    value: dict = {"stringValue": "leaf"}
    for _ in range(json_levels // 4):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    return value


TRACE_A, TRACE_B = "0af7651916cd43dd8448eb211c80319c", "1af7651916cd43dd8448eb211c80319c"
BAD_SPANS = {
    "non-numeric timestamp": {"startTimeUnixNano": "yesterday"},
    "integer trace id": {"traceId": 12345},
    "400-deep attribute": {"attributes": [{"key": "deep", "value": nested_value(400)}]},
    "messages that are not JSON": {
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": "[{not json"}},
        ]
    },
}


def post_otlp(client, token, body, content_type="application/json"):
    return client.post(reverse("otlp_traces"), body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.django_db
def test_malformed_spans_are_refused_one_by_one_and_the_good_span_of_the_request_is_stored(client, make_user):
    from flywheel.ingest.models import OtlpSpan

    token = api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]
    bad = [chat_span(TRACE_B, f"c7ad6b716920333{n}", **change) for n, change in enumerate(BAD_SPANS.values())]
    response = post_otlp(client, token, json.dumps(export(chat_span(TRACE_A, "b7ad6b7169203331"), *bad)))
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == 4
    for fragment in ("startTimeUnixNano", "traceId must be a string", "nest", "gen_ai.input.messages"):
        assert fragment in partial["errorMessage"]
    assert list(OtlpSpan.objects.values_list("trace_id", flat=True)) == [TRACE_A]
    assert Trajectory.objects.get().external_id == TRACE_A


@pytest.mark.django_db
def test_partial_success_is_encoded_in_protobuf_for_a_protobuf_request(client, make_user):
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    token = api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]
    bad_status = chat_span(TRACE_B, "c7ad6b7169203331", status={"code": 2})
    bad_status["attributes"].append({"key": "gen_ai.output.messages", "value": {"stringValue": '{"role": 1}'}})
    body = ParseDict(export(chat_span(TRACE_A, "b7ad6b7169203331"), bad_status), ExportTraceServiceRequest())
    response = post_otlp(client, token, body.SerializeToString(), "application/x-protobuf")
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert response.status_code == 200 and response["Content-Type"] == "application/x-protobuf"
    assert answer.partial_success.rejected_spans == 1
    assert "gen_ai.output.messages" in answer.partial_success.error_message
    assert Trajectory.objects.get().external_id == TRACE_A


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"\x0a\xff\xff\xff", "application/x-protobuf"),
        (b"{not json", "application/json"),
        (b"[" * 5000 + b"]" * 5000, "application/json"),
        (json.dumps({"resourceSpans": "many"}).encode(), "application/json"),
    ],
)
def test_a_body_that_cannot_be_decoded_is_400_and_stores_nothing(client, make_user, body, content_type):
    token = api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]
    response = post_otlp(client, token, body, content_type)
    assert response.status_code == 400 and response.json()["error"]
    assert not Trajectory.objects.exists()


@pytest.mark.django_db
def test_a_trace_never_freezes_after_a_bad_span(client, make_user):
    from flywheel.ingest.models import OtlpSpan

    token = api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]
    bad = chat_span(TRACE_A, "c7ad6b7169203331", **BAD_SPANS["messages that are not JSON"])
    assert post_otlp(client, token, json.dumps(export(bad))).json()["partialSuccess"]["rejectedSpans"] == 1
    # A span stored before spans were checked (as main stored them) must not spoil the trace either.
    OtlpSpan.objects.create(
        trace_id=TRACE_A,
        span_id="d7ad6b7169203331",
        payload={"name": "old", "attributes": []},
        received_at=timezone.now(),
    )
    response = post_otlp(client, token, json.dumps(export(chat_span(TRACE_A, "b7ad6b7169203331", "Hello"))))
    assert response.status_code == 200 and response.json() == {}
    trajectory = Trajectory.objects.get(external_id=TRACE_A)
    assert trajectory.final_result == "Hello" and trajectory.metadata["skipped_spans"] == 1
    later = chat_span(TRACE_A, "e7ad6b7169203331", "Bye", startTimeUnixNano="1700000001000000000",
                      endTimeUnixNano="1700000002000000000")  # fmt: skip
    assert post_otlp(client, token, json.dumps(export(later))).status_code == 200
    assert Trajectory.objects.get(external_id=TRACE_A).final_result == "Bye"


@pytest.mark.django_db
def test_an_outsider_s_spans_for_another_agent_are_refused_before_anything_is_stored(client, make_user):
    from flywheel.core.services import agent_create
    from flywheel.ingest.models import OtlpSpan

    own = agent_create(actor=None, name="own-bot")
    agent_create(actor=None, name="json-bot")
    outsider = make_user(Role.REVIEWER, agents=[own])
    token = api_token_create(user=outsider, name="otel")[1]
    response = post_otlp(client, token, json.dumps(export(chat_span(TRACE_A, "b7ad6b7169203331"))))
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == 1
    assert "agent 'json-bot': not an agent you are a member of" in partial["errorMessage"]
    assert not OtlpSpan.objects.exists() and not Trajectory.objects.exists()
    member = api_token_create(user=make_user(Role.REVIEWER), name="otel")[1]  # all agents
    assert post_otlp(client, member, json.dumps(export(chat_span(TRACE_A, "b7ad6b7169203331")))).json() == {}
    assert Trajectory.objects.get().agent.name == "json-bot"
