"""The team's tools behind an MCP server: episodes over stdio, the server's tools offered, each failure said."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.trainer.test_orders_example import TASKS, DeskAgent
from trainer.contracts import ToolCall
from trainer.environments import EnvironmentUnavailable, make_environment
from trainer.environments.mcp import McpEnvironment
from trainer.episodes import run_episodes
from trainer.evaluate import Evaluation, evaluate_episodes
from trainer.rollout import Generation
from trainer.spec.environments import EpisodeBudget
from trainer.spec.eval import EvalConfig, SamplingConfig
from trainer.spec.tasks import load_tasks
from trainer.verifiers import SafetyPolicy, get_verifier

pytestmark = pytest.mark.slow  # each episode starts a server process
ORDERS_SERVER = "mcp:python -m trainer.examples.orders_mcp"


@pytest.fixture
def broken_servers(tmp_path):
    """Servers that lack the episode tools, die mid-episode, or hang."""
    (tmp_path / "no_episode_tools.py").write_text(
        textwrap.dedent("""
        from mcp.server.mcpserver import MCPServer
        server = MCPServer("plain")

        @server.tool()
        def ping() -> str:
            return "pong"

        server.run("stdio")
    """)
    )
    (tmp_path / "fragile.py").write_text(
        textwrap.dedent("""
        import os, time
        from mcp.server.mcpserver import MCPServer
        server = MCPServer("fragile", log_level="ERROR")

        @server.tool()
        def episode_reset(task: dict) -> str:
            return "ready"

        @server.tool()
        def episode_judge() -> dict:
            return {"execution_success": False, "reason": "never"}

        @server.tool()
        def crash() -> str:
            os._exit(3)

        @server.tool()
        def hang() -> str:
            time.sleep(60)
            return "late"

        server.run("stdio")
    """)
    )
    return tmp_path


def test_an_agent_solves_the_order_tasks_by_reading_the_mcp_servers_results():
    policy = SafetyPolicy.default()
    environment = make_environment(ORDERS_SERVER, policy=policy)
    try:
        offered = [tool["function"]["name"] for tool in environment.offered_tools()]
        assert offered == ["find_customer", "get_order", "cancel_order", "refund_order"]  # episode tools hidden
        run = Evaluation(backend=DeskAgent(), render=lambda task: json.dumps(task.messages),
                         verifier=get_verifier("binary"), policy=policy, environment=environment)  # fmt: skip
        budget = EvalConfig(environment=ORDERS_SERVER, max_turns=6).episode_budget()
        results = evaluate_episodes(load_tasks([TASKS]), run, SamplingConfig(), budget)
    finally:
        environment.close()
    assert [r.execution_success for r in results] == [True] * 6, [r.verdict["reason"] for r in results]
    assert results[0].episode[1] == {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "content": '{"email": "ana@example.com", "order_ids": ["A-1001", "A-1003"]}',
    }


def test_a_refusal_of_the_server_is_an_observation_the_model_reads():
    environment = make_environment(ORDERS_SERVER)
    try:
        environment.reset(load_tasks([TASKS])[0])
        refused = environment.step(ToolCall("refund_order", {"order_id": "B-2001"}))
    finally:
        environment.close()
    assert not refused.ok and "only a delivered order can be refunded" in refused.observation


def test_a_command_that_does_not_start_is_refused_before_any_step():
    with pytest.raises(EnvironmentUnavailable, match="did not start"):
        make_environment("mcp:/no/such/server --flag")


def test_a_server_without_the_episode_tools_is_refused(broken_servers):
    with pytest.raises(EnvironmentUnavailable, match="lacks the episode tools episode_judge, episode_reset"):
        McpEnvironment([sys.executable, str(broken_servers / "no_episode_tools.py")])


@pytest.mark.parametrize(("tool", "reason"), [("crash", "failed on crash"), ("hang", "failed on hang")])
def test_a_server_that_dies_or_hangs_ends_its_episode_with_the_reason(broken_servers, tool, reason):
    environment = McpEnvironment([sys.executable, str(broken_servers / "fragile.py")], call_timeout_s=2)
    calls = Generation(text=f'<tool_call>{{"name": "{tool}", "arguments": {{}}}}</tool_call>', prompt_tokens=1,
                       completion_tokens=1, finished=True, latency_s=0.0)  # fmt: skip
    try:
        [episode] = run_episodes(load_tasks([TASKS])[:1], environment.spawn, lambda cs: [calls] * len(cs),
                                 EpisodeBudget(max_turns=3))  # fmt: skip
    finally:
        environment.close()
    assert episode.ended == "error" and reason in episode.judgement.reason
    assert not episode.judgement.passed and episode.judgement.execution_success is False


def test_an_eval_job_over_an_mcp_server_runs_episodes_and_exits(tmp_path):
    from tests.trainer.tiny_model import REPO_ROOT, write_spec

    spec = write_spec(tmp_path / "run.json", task_paths=[str(TASKS)],
                      hyperparameters={"environment": ORDERS_SERVER, "max_turns": 2, "max_new_tokens": 8,
                                       "sample_size": 2})  # fmt: skip
    completed = subprocess.run([sys.executable, "-m", "trainer", "eval", "--spec", str(spec)], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=240)  # an open client would hang the exit
    events = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    assert completed.returncode == 0 and events[-1]["event"] == "done", completed.stderr[-2000:]
    assert events[-1]["metrics"]["tasks"] == 2 and events[-1]["metrics"]["execution_success_rate"]["n"] == 2


def test_a_server_that_dies_on_its_second_call_fails_that_episode_after_the_first_result_reached_the_model(tmp_path):
    (tmp_path / "mortal.py").write_text(
        textwrap.dedent("""
        import os
        from typing import Any
        from mcp.server.mcpserver import MCPServer
        server = MCPServer("mortal", log_level="ERROR")
        calls = []

        @server.tool()
        def episode_reset(task: dict) -> str:
            return "ready"

        @server.tool()
        def episode_judge() -> dict[str, Any]:
            return {"execution_success": True, "reason": "pinged"}

        @server.tool()
        def ping() -> str:
            calls.append(1)
            if len(calls) == 2:
                os._exit(1)
            return "pong"

        server.run("stdio")
    """)
    )
    ping = Generation(text='<tool_call>{"name": "ping", "arguments": {}}</tool_call>', prompt_tokens=1,
                      completion_tokens=1, finished=True, latency_s=0.0)  # fmt: skip
    done = Generation(text="Pinged.", prompt_tokens=1, completion_tokens=1, finished=True, latency_s=0.0)

    def replies(episodes):  # task 0 pings on every turn; task 1 pings once and answers
        return [ping if not episode.turns or episode.task.id == tasks[0].id else done for episode in episodes]

    tasks = load_tasks([TASKS])[:2]
    environment = McpEnvironment([sys.executable, str(tmp_path / "mortal.py")], call_timeout_s=10)
    try:
        dead, alive = run_episodes(tasks, environment.spawn, replies, EpisodeBudget(max_turns=4))
    finally:
        environment.close()
    assert [m["content"] for m in dead.messages if m["role"] == "tool"] == ["pong"]
    assert dead.ended == "error" and len(dead.turns) == 2
    assert dead.judgement.reason.startswith("turn 2: environment error on ping: RuntimeError: MCP server ")
    assert "failed on ping" in dead.judgement.reason
    assert not dead.judgement.passed and dead.judgement.execution_success is False
    assert alive.ended == "answered" and alive.judgement.passed and alive.judgement.reason == "pinged"
