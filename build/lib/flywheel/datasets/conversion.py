"""Draft a regression task from a trajectory: the context up to the failing step and the call to expect,
or an episode that starts at a user turn before it.

The messages are the trajectory's steps before the marked step, turned back into OpenAI chat
messages (tool calls as assistant `tool_calls`, results as `tool` messages); the tools are the
agent's catalogue; the wrong call is the marked step's. For tau-bench trajectories the record's
ground-truth actions (`metadata.info.task.actions`) are offered as the expected call, the one
naming the same tool first. Reads only; the service saves. `answer_message` is the marked step as
the answer it recorded (the registry's replay scores it beside a version's new answer).

An episode draft (`episode_draft`) keeps the conversation up to and including a user turn
(by default the last one before the failing step); its expected calls are the ground-truth
actions the trajectory had not already made before that turn, in the record's order. Its
episode runs in the agent's environment, or where the agent names none in `replay`, which
answers from the trajectory's tool calls after that turn and their recorded results (the start
state holds them either way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flywheel.datasets.models import Environment
from flywheel.ingest.models import Step, StepKind, Trajectory
from trainer.contracts import EpisodeSetup

USER_KINDS = (StepKind.USER, StepKind.HUMAN_INTERVENTION)


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


def steps_messages(steps: list[Step]) -> list[dict[str, Any]]:
    """The steps as OpenAI chat messages: parallel calls as one assistant message, results as tool messages."""
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


def answer_message(step: Step) -> dict[str, Any] | None:
    """The step as the assistant message that answered at that point (a call, or a text); None for other kinds.

    What the trajectory recorded where a task drafted at this step expects its answer: the replay
    of a failing step shows and scores it beside a version's new answer.
    """
    if step.kind not in (StepKind.TOOL_CALL, StepKind.ASSISTANT):
        return None
    messages = steps_messages([step])
    return messages[0] if messages else None


AGENT_KINDS = (StepKind.TOOL_CALL, StepKind.ASSISTANT)


def agent_turn(steps: list[Step], index: int) -> list[Step]:
    """The agent's turn that step `index` belongs to: its run of consecutive tool calls, or its one answer.

    Parallel calls are one assistant message, so correcting one of them replaces the whole turn.
    Raises ValueError for a step that is not the agent's.
    """
    position = next((at for at, step in enumerate(steps) if step.index == index), None)
    if position is None:
        raise ValueError(f"the trajectory has no step {index}")
    step = steps[position]
    if step.kind not in AGENT_KINDS:
        raise ValueError(f"step {index} is a {step.get_kind_display().lower()} step, not the agent's call or answer")
    if step.kind == StepKind.ASSISTANT:
        return [step]
    start = end = position
    while start > 0 and steps[start - 1].kind == StepKind.TOOL_CALL:
        start -= 1
    while end + 1 < len(steps) and steps[end + 1].kind == StepKind.TOOL_CALL:
        end += 1
    return steps[start : end + 1]


def turn_message(turn: list[Step]) -> dict[str, Any]:
    """An agent's turn as the one assistant message it was (arguments as JSON strings, as recorded)."""
    return steps_messages(turn)[0]


def conversation_before(steps: list[Step], index: int) -> list[dict[str, Any]]:
    """The chat messages of the steps before step `index`."""
    return steps_messages([step for step in steps if step.index < index])


def intervention_turns(steps: list[Step]) -> list[tuple[Step, list[Step]]]:
    """Each human intervention with the agent's turn it overrode: the last call or answer before it.

    Tool results and errors between the two are skipped; an intervention with a user, system or
    another intervention step between it and the agent's last turn (or none before it) overrode
    nothing the agent did, and is left out.
    """
    found = []
    for position, step in enumerate(steps):
        if step.kind != StepKind.HUMAN_INTERVENTION:
            continue
        before = next((earlier for earlier in reversed(steps[:position])
                       if earlier.kind not in (StepKind.TOOL_RESULT, StepKind.ERROR)), None)  # fmt: skip
        if before is not None and before.kind in AGENT_KINDS:
            found.append((step, agent_turn(steps, before.index)))
    return found


def step_source_ref(step_index: int) -> str:
    """The `source_ref` of the next-call task drafted at `step_index` (a replay finds the task by it)."""
    return f"step {step_index}"


def _actions(trajectory: Trajectory) -> list[tuple[str, dict[str, Any]]]:
    """tau-bench's ground-truth actions as (name, arguments), in the record's order."""
    actions = ((trajectory.metadata.get("info") or {}).get("task") or {}).get("actions") or []
    return [
        (action["name"], action.get("kwargs") or {})
        for action in actions
        if isinstance(action, dict) and isinstance(action.get("name"), str)
    ]


def _expected(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "arguments": {key: [value] for key, value in arguments.items()}}


def _ground_truth(trajectory: Trajectory, wrong_name: str) -> list[dict[str, Any]]:
    calls = [_expected(name, arguments) for name, arguments in _actions(trajectory)]
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
        messages=steps_messages([step for step in steps if step.index < index]),
        tools=list(trajectory.agent.tools),
        wrong_call=wrong,
        suggested_calls=_ground_truth(trajectory, marked.tool_name),
    )


@dataclass
class EpisodeDraft:
    """An episode task drafted from a trajectory: it starts by answering the user turn `start_index`."""

    start_index: int
    starts: list[Step]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    expected: list[dict[str, Any]]
    episode: EpisodeSetup

    @property
    def recorded(self) -> list[dict[str, Any]]:
        return list(self.episode.start_state["recorded"])


def default_start(steps: list[Step], failing: int) -> int:
    """The last user turn before the failing step, else the first user turn."""
    turns = [step.index for step in steps if step.kind in USER_KINDS]
    if not turns:
        raise ValueError("the trajectory has no user turn to start an episode at")
    before = [index for index in turns if index < failing]
    return before[-1] if before else turns[0]


def _result_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def recorded_calls(steps: list[Step], after: int) -> list[dict[str, Any]]:
    """The tool calls after step `after` with their recorded results, for the replay to answer from.

    A call whose arguments were not a JSON object, or that got no result, has nothing a model's
    call could match or be answered with, so it is left out.
    """
    results = {step.tool_call_id: step for step in steps if step.kind == StepKind.TOOL_RESULT and step.tool_call_id}
    recorded = []
    for step in steps:
        result = results.get(step.tool_call_id) if step.tool_call_id else None
        if step.index <= after or step.kind != StepKind.TOOL_CALL or result is None:
            continue
        if isinstance(step.tool_arguments, dict) and not step.tool_arguments_raw:
            recorded.append({"name": step.tool_name, "arguments": step.tool_arguments,
                             "result": _result_value(result.text)})  # fmt: skip
    return recorded


def _remaining_actions(trajectory: Trajectory, steps: list[Step], start: int) -> list[dict[str, Any]]:
    """The ground-truth actions the trajectory had not already made, same name and arguments, before `start`."""
    made = [(step.tool_name, step.tool_arguments) for step in steps
            if step.kind == StepKind.TOOL_CALL and step.index < start]  # fmt: skip
    remaining = []
    for name, arguments in _actions(trajectory):
        if (name, arguments) in made:
            made.remove((name, arguments))
        else:
            remaining.append(_expected(name, arguments))
    return remaining


def episode_draft(*, trajectory: Trajectory, draft: TaskDraft, start: int | None = None) -> EpisodeDraft:
    """The episode that starts at the user turn `start` (default: the last one before `draft`'s step)."""
    steps = list(trajectory.steps.order_by("index"))
    starts = [step for step in steps if step.kind in USER_KINDS]
    start_index = default_start(steps, draft.step_index) if start is None else start
    if start_index not in {step.index for step in starts}:
        raise ValueError(f"step {start_index} is not a user turn of the trajectory")
    recorded = recorded_calls(steps, start_index)
    # Without a recorded ground truth the failing call is prefilled, to be corrected, as for a next-call task.
    expected = _remaining_actions(trajectory, steps, start_index) if draft.suggested_calls else draft.expected_calls()
    return EpisodeDraft(
        start_index=start_index,
        starts=starts,
        messages=steps_messages([step for step in steps if step.index <= start_index]),
        tools=draft.tools,
        expected=expected,
        episode=EpisodeSetup(
            environment=trajectory.agent.environment or Environment.REPLAY.value, start_state={"recorded": recorded}
        ),
    )


def environment_column(name: str) -> str:
    """What a task's `environment` column says for an episode in the environment `name`."""
    return name if name in Environment.values else Environment.TEAM
