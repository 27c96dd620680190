"""OTLP/HTTP traces: the real OpenTelemetry SDK exporting GenAI spans to the live test server."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

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
