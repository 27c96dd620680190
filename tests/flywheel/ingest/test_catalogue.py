from __future__ import annotations

import io
import json

import pytest

from flywheel.core.models import Agent
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from tests.conftest import REPO_ROOT
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = pytest.mark.django_db
NEMO = REPO_ROOT.parent / "shared" / "external" / "nemo_gym"


def test_the_tau_bench_agent_gets_a_catalogue_inferred_from_its_calls(tau_bench_path):
    options = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=options)
    agent = Agent.objects.get(name="airline")
    assert agent.tools_source == Agent.ToolsSource.INFERRED
    tools = {tool["function"]["name"]: tool["function"]["parameters"]["properties"] for tool in agent.tools}
    assert {"user_id", "origin", "destination", "flight_type", "cabin", "flights", "passengers"} <= set(
        tools["book_reservation"]
    )
    assert tools["book_reservation"]["flights"] == {"type": "array"}
    assert tools["get_user_details"] == {"user_id": {"type": "string"}}


def test_nemo_gym_rollouts_ingest_with_calls_outputs_rewards_and_declared_tools():
    path = NEMO / "workplace_assistant" / "example_rollouts.jsonl"
    with path.open("rb") as stream:
        report = stream_ingest(stream=stream, options=IngestOptions(format="responses", agent="workplace"))
    assert (report.stored, report.rejected) == (5, 0)
    agent = Agent.objects.get(name="workplace")
    assert agent.tools_source == Agent.ToolsSource.UPLOADED and len(agent.tools) == 27
    trajectory = agent.trajectories.get(external_id__startswith="resp_68d0936ea5fc")
    kinds = list(trajectory.steps.order_by("index").values_list("kind", "tool_name"))
    assert ("tool_call", "analytics_create_plot") in kinds and ("tool_result", "analytics_create_plot") in kinds
    assert trajectory.outcome == "failure" and trajectory.input_tokens == 2279


def test_declared_schemas_replace_inferred_ones():
    call = {"kind": "tool_call", "tool": "lookup", "arguments": {"q": "x"}}
    record = {"id": "1", "agent": "bot", "steps": [call]}
    declared = {
        **record,
        "id": "2",
        "tools": [{"name": "lookup", "description": "Find", "parameters": {"type": "object"}}],
    }
    data = (json.dumps(record) + "\n" + json.dumps(declared) + "\n").encode()
    stream_ingest(stream=io.BytesIO(data), options=IngestOptions(format="native"))
    agent = Agent.objects.get(name="bot")
    assert agent.tools_source == Agent.ToolsSource.UPLOADED
    assert agent.tools == [
        {"type": "function", "function": {"name": "lookup", "description": "Find", "parameters": {"type": "object"}}}
    ]
