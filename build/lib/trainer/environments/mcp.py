"""A team's tools served by an MCP server over stdio, as an environment: `mcp:<command>`.

`"environment": "mcp:python -m my_team.tools_server"` starts the command (a leading `python`
is this interpreter, so the job's virtualenv runs it) with the `mcp` SDK's stdio client, one
server per episode run side by side. The server's tools become the episode's tools (the
prompt lists them, whatever the task file says), except two that the server must offer for
us and that the model never sees: `episode_reset(task)` (the task's JSON; start an episode
from the starting state) and `episode_judge()` (check the end state; answer
`{"execution_success": bool, "reason": str}`). Each call waits at most `call_timeout_s`.
Safety is ours: every call the model made is checked against the agent's policy.

Failure is always a clear message, never a hang: a command that does not start, or a server
without the episode tools, is EnvironmentUnavailable before any step; a call that times out
or a server that dies mid-episode raises from `step`, which ends that episode as an
environment error with the reason (`trainer.episodes`); a tool that refuses is an observation
the model reads (`ok` false). The example server is `trainer.examples.orders_mcp`.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from typing import Any, ClassVar

from trainer.contracts import Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.environments.entry_point import EnvironmentUnavailable
from trainer.spec.environments import MCP_PREFIX
from trainer.verifiers.safety import SafetyPolicy, check_task_calls

RESET_TOOL, JUDGE_TOOL = "episode_reset", "episode_judge"
CALL_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0


def is_mcp(name: str) -> bool:
    return name.startswith(MCP_PREFIX) and bool(name[len(MCP_PREFIX) :].strip())


def server_command(name: str) -> list[str]:
    """The command line an `mcp:` environment name holds, `python` read as this interpreter."""
    words = shlex.split(name[len(MCP_PREFIX) :])
    if words and words[0] in ("python", "python3"):
        words[0] = sys.executable
    return words


class McpEnvironment(Environment):
    name: ClassVar[str] = "mcp"

    def __init__(self, command: list[str], policy: SafetyPolicy | None = None,
                 call_timeout_s: float = CALL_TIMEOUT_S) -> None:  # fmt: skip
        self.command = command
        self.policy = policy or SafetyPolicy.default()
        self.call_timeout_s = call_timeout_s
        self._task: Task | None = None
        self._calls: list[ToolCall] = []
        self._stack = contextlib.ExitStack()
        self._client, self._portal, self._tools = self._connect()

    @property
    def label(self) -> str:
        return f"mcp: {shlex.join(self.command)}"

    def spawn(self) -> McpEnvironment:
        return McpEnvironment(self.command, self.policy, self.call_timeout_s)

    def offered_tools(self) -> list[dict[str, Any]]:
        return self._tools

    def reset(self, task: Task) -> None:
        self._task, self._calls = task, []
        result = self._call(RESET_TOOL, {"task": task.to_json()})
        if result.is_error:
            raise RuntimeError(f"{RESET_TOOL} refused the task: {_text(result)}")

    def step(self, call: ToolCall) -> StepResult:
        self._current()
        self._calls.append(call)
        if call.name in (RESET_TOOL, JUDGE_TOOL) or call.name not in {t["function"]["name"] for t in self._tools}:
            return StepResult(f"Unknown tool {call.name!r}.", done=False, ok=False)
        result = self._call(call.name, dict(call.arguments))
        return StepResult(_observation(result), done=False, ok=not result.is_error)

    def judge(self) -> Judgement:
        task = self._current()
        result = self._call(JUDGE_TOOL, {})
        verdict = result.structured_content if isinstance(result.structured_content, dict) else {}
        if result.is_error or not isinstance(verdict.get("execution_success"), bool):
            raise RuntimeError(f"{JUDGE_TOOL} did not answer {{execution_success, reason}}: {_text(result)[:200]}")
        reached = verdict["execution_success"]
        unsafe = [violation.rule_id for violation in check_task_calls(self.policy, task, self._calls)]
        reason = str(verdict.get("reason") or ("end state reached" if reached else "end state not reached"))
        return Judgement(task_id=task.id, reward=1.0 if reached and not unsafe else 0.0, passed=reached and not unsafe,
                         reason=reason + (f"; unsafe: {', '.join(unsafe)}" if unsafe else ""),
                         components={"execution_success": float(reached)}, turns=len(self._calls), unsafe=unsafe,
                         execution_success=reached)  # fmt: skip

    def close(self) -> None:
        self._stack.close()

    def _connect(self) -> tuple[Any, Any, list[dict[str, Any]]]:
        from anyio.from_thread import start_blocking_portal
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters

        shown = shlex.join(self.command)
        try:
            portal = self._stack.enter_context(start_blocking_portal())
            params = StdioServerParameters(command=self.command[0], args=self.command[1:])
            client = self._stack.enter_context(portal.wrap_async_context_manager(
                Client(params, read_timeout_seconds=START_TIMEOUT_S)))  # fmt: skip
            listed = portal.call(client.list_tools).tools
        except Exception as error:  # noqa: BLE001 - whatever stops the server from starting, say it
            self._stack.close()
            message = f"MCP server `{shown}` did not start: {type(error).__name__}: {error}"
            raise EnvironmentUnavailable(message) from None
        names = {tool.name for tool in listed}
        if missing := sorted({RESET_TOOL, JUDGE_TOOL} - names):
            self._stack.close()
            raise EnvironmentUnavailable(f"MCP server `{shown}` lacks the episode tools {', '.join(missing)}")
        tools = [{"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                                   "parameters": tool.input_schema}}
                 for tool in listed if tool.name not in (RESET_TOOL, JUDGE_TOOL)]  # fmt: skip
        return client, portal, tools

    def _call(self, tool: str, arguments: dict[str, Any]) -> Any:
        try:
            return self._portal.call(
                lambda: self._client.call_tool(tool, arguments, read_timeout_seconds=self.call_timeout_s)
            )
        except Exception as error:  # noqa: BLE001 - a timeout or a dead server ends the episode with the reason
            raise RuntimeError(
                f"MCP server `{shlex.join(self.command)}` failed on {tool}: {type(error).__name__}: {error}"
            ) from None

    def _current(self) -> Task:
        if self._task is None:
            raise RuntimeError("reset(task) must start an episode before step or judge")
        return self._task


def _observation(result: Any) -> Any:
    """What the model reads: the structured result (unwrapped where the SDK wrapped a bare value as
    `{"result": ...}`), else the text."""
    structured = result.structured_content
    if structured is None:
        return _text(result)
    if isinstance(structured, dict) and list(structured) == ["result"]:
        return structured["result"]
    return structured


def _text(result: Any) -> str:
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    return "\n".join(texts) if texts else json.dumps(result.structured_content, default=str)
