"""Draft a regression task from a trajectory: the context up to the failing step and the call to expect.

The messages are the trajectory's steps before the marked step, turned back into OpenAI chat
messages (tool calls as assistant `tool_calls`, results as `tool` messages); the tools are the
agent's catalogue; the wrong call is the marked step's. For tau-bench trajectories the record's
ground-truth actions (`metadata.info.task.actions`) are offered as the expected call, the one
naming the same tool first. Reads only; the service saves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flywheel.ingest.models import Step, StepKind, Trajectory


@dataclass
class TaskDraft:
    step_index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    wrong_call: dict[str, Any] | None
    suggested_calls: list[dict[str, Any]] = field(default_factory=list)

    def expected_calls(self) -> list[dict[str, Any]]:
        """What to prefill: the first ground-truth action, else the wrong call itself, to be corrected."""
        if self.suggested_calls:
            return self.suggested_calls[:1]
        if self.wrong_call is None:
            return []
        arguments = self.wrong_call["arguments"] or {}
        return [{"name": self.wrong_call["name"], "arguments": {key: [value] for key, value in arguments.items()}}]


def failing_step(steps: list[Step]) -> int:
    """The first tool call answered by an error, else the last tool call, else the last step."""
    results = {step.tool_call_id: step for step in steps if step.kind == StepKind.TOOL_RESULT and step.tool_call_id}
    calls = [step for step in steps if step.kind == StepKind.TOOL_CALL]
    for call in calls:
        result = results.get(call.tool_call_id)
        if result is not None and result.is_error:
            return call.index
    return calls[-1].index if calls else steps[-1].index


def _messages(steps: list[Step]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for step in steps:
        if step.kind in (StepKind.SYSTEM, StepKind.USER, StepKind.ASSISTANT) and step.text:
            messages.append({"role": str(step.kind), "content": step.text})
        elif step.kind == StepKind.HUMAN_INTERVENTION:
            messages.append({"role": "user", "content": step.text})
        elif step.kind == StepKind.TOOL_CALL:
            arguments = step.tool_arguments_raw or json.dumps(step.tool_arguments or {}, ensure_ascii=False)
            call = {
                "id": step.tool_call_id,
                "type": "function",
                "function": {"name": step.tool_name, "arguments": arguments},
            }
            if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif step.kind == StepKind.TOOL_RESULT:
            messages.append({"role": "tool", "tool_call_id": step.tool_call_id, "content": step.text})
    return messages


def _ground_truth(trajectory: Trajectory, wrong_name: str) -> list[dict[str, Any]]:
    actions = ((trajectory.metadata.get("info") or {}).get("task") or {}).get("actions") or []
    calls = [
        {"name": action["name"], "arguments": {key: [value] for key, value in (action.get("kwargs") or {}).items()}}
        for action in actions
        if isinstance(action, dict) and isinstance(action.get("name"), str)
    ]
    return sorted(calls, key=lambda call: call["name"] != wrong_name)


def task_draft(*, trajectory: Trajectory, step_index: int | None = None) -> TaskDraft:
    steps = list(trajectory.steps.order_by("index"))
    if not steps:
        raise ValueError("the trajectory has no steps")
    index = failing_step(steps) if step_index is None else step_index
    marked = next((step for step in steps if step.index == index), None)
    if marked is None:
        raise ValueError(f"the trajectory has no step {index}")
    wrong = None
    if marked.kind == StepKind.TOOL_CALL:
        wrong = {"name": marked.tool_name, "arguments": marked.tool_arguments, "raw": marked.tool_arguments_raw}
    return TaskDraft(
        step_index=index,
        messages=_messages([step for step in steps if step.index < index]),
        tools=list(trajectory.agent.tools),
        wrong_call=wrong,
        suggested_calls=_ground_truth(trajectory, marked.tool_name),
    )
