"""Real clients' telemetry: the `openai` client instrumented by the two common OpenAI instrumentations.

`opentelemetry-instrumentation-openai-v2` (content capture on: `span_only`, and `event_only`,
whose messages come as a log event over `/v1/logs`) and `openinference-instrumentation-openai`
instrument the real client, which asks the app's
`/v1/chat/completions` (the live version answers through the stub upstream below); the real OTLP
HTTP exporters send the spans to the app's `/v1/traces` (and logs to `/v1/logs`) with the same API token. The endpoint
also records the answer itself (the recording task's messages are caught and run here, as a
worker would, before or after the export): either way the call is one trajectory, tagged with the
version that answered, with its tool call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import Trajectory
from flywheel.registry import tasks
from tests.flywheel.registry.conftest import UpstreamHandler, settled

pytestmark = [pytest.mark.django_db(transaction=True)]
QUESTION = [{"role": "system", "content": "You are the support bot."},
            {"role": "user", "content": "Where is order 17?"}]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "find_order", "description": "Find an order by number",
                                           "parameters": {"type": "object",
                                                          "properties": {"order": {"type": "integer"}}}}}]  # fmt: skip
CALL = {"id": "call_17", "type": "function", "function": {"name": "find_order", "arguments": '{"order": 17}'}}


class Upstream(UpstreamHandler):
    """A served model that calls find_order, each answer with its own id."""

    answers = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        Upstream.answers += 1
        answer = {"id": f"chatcmpl-traced-{Upstream.answers}", "object": "chat.completion", "created": 0,
                  "model": "upstream", "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
                  "choices": [{"index": 0, "finish_reason": "tool_calls",
                               "message": {"role": "assistant", "content": None, "tool_calls": [CALL]}}]}  # fmt: skip
        self.reply(200, "application/json", [json.dumps(answer).encode()])


@pytest.fixture
def upstream(serve_upstream) -> str:
    return serve_upstream(Upstream)


@pytest.fixture
def token(make_user) -> str:
    """One API token, as an agent's product has: reviewers may both chat and export traces."""
    return api_token_create(user=make_user(Role.REVIEWER), name="support-bot")[1]


def openai_v2(tracer_provider: Any, logger_provider: Any) -> Any:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
    return instrumentor


def openinference(tracer_provider: Any, logger_provider: Any) -> Any:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    return instrumentor


# name: (instrument, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)
INSTRUMENTATIONS = {
    "openai-v2 span_only": (openai_v2, "span_only"),
    "openai-v2 event_only": (openai_v2, "event_only"),  # the messages come as a log event, over /v1/logs
    "openinference": (openinference, ""),
}


@pytest.fixture(params=list(INSTRUMENTATIONS))
def instrumented(request, monkeypatch, live_server, token) -> Iterator[Callable[[], None]]:
    """The real client, instrumented and exporting to the app as a new user would set it up.

    No resource is named (the SDK's `unknown_service`): the agent and the version come from the
    answer's model. Yields `flush`, which sends the finished spans, then the log records.
    """
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    instrument, capture = INSTRUMENTATIONS[request.param]
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", capture)
    headers = {"Authorization": f"Bearer {token}"}
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=f"{live_server.url}/v1/traces", headers=headers, timeout=30),
        schedule_delay_millis=60_000))  # fmt: skip
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(
        OTLPLogExporter(endpoint=f"{live_server.url}/v1/logs", headers=headers, timeout=30),
        schedule_delay_millis=60_000))  # fmt: skip
    instrumentor = instrument(tracer_provider, logger_provider)

    def flush() -> None:
        assert tracer_provider.force_flush(30_000) and logger_provider.force_flush(30_000), "an export failed"

    try:
        yield flush
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()
        logger_provider.shutdown()


def ask(live_server, token: str) -> Any:
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=30)
    return chat.chat.completions.create(model="support-bot", messages=QUESTION, tools=TOOLS)


def assert_one_tagged_trajectory_with_its_call(answer: Any) -> Trajectory:
    [trajectory] = Trajectory.objects.all()
    assert (trajectory.source, trajectory.external_id) == ("served", answer.id)
    assert trajectory.model_version == "support-bot:v1" == answer.model
    steps = list(trajectory.steps.order_by("index").values_list("kind", "text", "tool_name", "tool_arguments"))
    assert steps == [("system", QUESTION[0]["content"], "", None), ("user", QUESTION[1]["content"], "", None),
                     ("tool_call", "", "find_order", {"order": 17})]  # fmt: skip
    assert trajectory.metadata["otlp"]["trace_id"]
    return trajectory


def test_the_endpoint_records_the_call_first_and_the_exported_trace_is_the_same_trajectory(
    upstream, live, sent, live_server, token, instrumented
):
    answer = ask(live_server, token)
    assert settled(lambda: len(sent) == 1)  # the endpoint keeps the answer once the response has gone out
    assert [tasks.record_served(message) for message in sent] == ["stored"]
    instrumented()
    trajectory = assert_one_tagged_trajectory_with_its_call(answer)
    assert trajectory.metadata["served"]["adapter_sha256"] == live.adapter_sha256


def test_the_exported_trace_comes_first_and_the_endpoint_s_record_takes_its_place(
    upstream, live, sent, live_server, token, instrumented
):
    answer = ask(live_server, token)
    instrumented()
    [traced] = Trajectory.objects.all()
    assert (traced.source, traced.model_version, traced.agent.name) == ("otlp", "support-bot:v1", "support-bot")
    assert traced.steps.filter(kind="tool_call", tool_name="find_order").exists()
    assert settled(lambda: len(sent) == 1)
    assert [tasks.record_served(message) for message in sent] == ["stored"]
    trajectory = assert_one_tagged_trajectory_with_its_call(answer)
    assert trajectory.pk == traced.pk  # the same row: whatever was attached to it stays


def test_without_the_endpoint_s_record_the_trace_alone_is_the_tagged_trajectory(
    upstream, live, sent, live_server, token, instrumented
):
    answer = ask(live_server, token)
    instrumented()
    assert settled(lambda: len(sent) == 1)
    sent.clear()  # the agent's recording sampled this answer out
    [trajectory] = Trajectory.objects.all()
    assert (trajectory.source, trajectory.model_version) == ("otlp", answer.model)
    assert trajectory.metadata["response_id"] == answer.id
    call = trajectory.steps.get(kind="tool_call")
    assert (call.tool_name, call.tool_arguments, call.tool_call_id) == ("find_order", {"order": 17}, "call_17")
