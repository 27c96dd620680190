"""Replay a trajectory's failing step against a version: what is sent, and how the answer comes back.

An approver about to promote a candidate wants to see it fix the exact case that failed. A
replay cuts the trajectory where a task drafted from it is cut (`datasets.conversion.task_draft`:
the messages before the failing step, the agent's tools), has a chosen version (candidate or
live) answer that conversation, and keeps its answer beside the recorded one, both scored alike.

Design: a replay is a job, never a request to the serving process. The live version is served
by one managed `trainer serve` (or vLLM) that the app switches to the live adapter; asking it
for a candidate would switch, or at best load, the candidate where live traffic is answered.
So the replay runs as a small job of kind `replay` on the `gpu` queue, through the same runner,
events, samples, heartbeat, cancel and reaper as every job: the trainer loads the version's base
model and verified adapter in its own process, renders the conversation as evaluation does,
generates the single next answer (greedy, so a replay run twice answers the same; for an agent
that plays episodes the next turn is what failed, so one turn is replayed, not a new episode)
and scores both answers (`trainer.verifiers.answer`): calls written as JSON, schema validity
against the tools, the agent's safety policy (carried by the job's spec as for every kind), and,
where an expected answer is known, correctness with the `tool_call` verifier. The live version
is replayed the same way, so the two answers an approver compares come from one path. The cost:
an answer in the time a job takes to start and load the model (seconds on the tiny model, more
on a large one), shown as a status the page polls.

The expected answer is the one a reviewer wrote for this step: the newest next-call task
converted from the trajectory at the same step. Without one, correctness is not judged (never
guessed from tau-bench's ground truth, which conversion only offers as a suggestion).

This module builds the case and reads the result; `services.replay_launch` and
`services.replay_result_store` write, `selectors` read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.datasets.conversion import answer_message, step_source_ref, task_draft
from flywheel.datasets.models import Environment, RegressionTask
from flywheel.ingest.models import Trajectory
from flywheel.training.models import Job
from trainer.contracts import ContractError, read_json_lines

EXPECTED_KEYS = ("expected_calls", "no_call_expected", "order_sensitive")


class ReplayUnavailable(ValueError):
    """The trajectory cannot be replayed at that step; the message says why."""


@dataclass(frozen=True)
class ReplayInput:
    """What a replay sends: the case (`trainer.spec.replay.ReplayCase` JSON), its step, its expected answer's source."""

    step_index: int
    case: dict[str, Any]
    expected_source: str


def expected_task(trajectory: Trajectory, step_index: int) -> RegressionTask | None:
    """The newest next-call task converted from the trajectory at `step_index`: its expected answer is the step's."""
    tasks = RegressionTask.objects.filter(source_trajectory=trajectory, source_ref=step_source_ref(step_index),
                                          environment=Environment.SINGLE_STEP)  # fmt: skip
    return tasks.order_by("-updated_at").first()


def replay_input(*, trajectory: Trajectory, step_index: int | None = None) -> ReplayInput:
    """The case for the trajectory's failing step (or `step_index`), cut as conversion cuts a task."""
    try:
        draft = task_draft(trajectory=trajectory, step_index=step_index)
    except ValueError as error:
        raise ReplayUnavailable(str(error)) from None
    if not draft.messages:
        raise ReplayUnavailable(f"there is no conversation before step {draft.step_index} to answer")
    marked = trajectory.steps.get(index=draft.step_index)
    task = expected_task(trajectory, draft.step_index)
    expected = {key: task.content[key] for key in EXPECTED_KEYS if key in task.content} if task else None
    case = {"id": f"{trajectory.pk}@step{draft.step_index}", "messages": draft.messages, "tools": draft.tools,
            "expected": expected, "original": answer_message(marked)}  # fmt: skip
    return ReplayInput(step_index=draft.step_index, case=case,
                       expected_source=f"task {task.external_id}" if task else "")  # fmt: skip


def replay_outcome(*, job: Job) -> dict[str, Any]:
    """The results line of a succeeded replay job's one case; a ReplayUnavailable says why it cannot be read."""
    path = (job.result or {}).get("results")
    case_id = str((job.cases or [{}])[0].get("id", ""))
    try:
        lines = list(read_json_lines(Path(path))) if path else []
    except (OSError, ContractError) as error:
        raise ReplayUnavailable(f"the replay's results cannot be read: {error}") from None
    line = next((line for line in lines if isinstance(line, dict) and line.get("id") == case_id), None)
    if line is None or not isinstance(line.get("scores"), dict):
        raise ReplayUnavailable(f"the replay job wrote no result for {case_id}")
    return line


def usage_of(line: dict[str, Any]) -> dict[str, Any]:
    """What the answer cost: tokens, latency, and whether the token limit cut it."""
    return {key: line.get(key) for key in ("prompt_tokens", "completion_tokens", "latency_s", "finished")}
