"""Run a file of model outputs through an environment: what `python -m trainer verify --env` does.

Tasks and output lines are read as `trainer.verifiers.batch` reads them, and each output is
one whole episode: for `workbench` a list of calls (`{"id": ..., "output": [call, call, ...]}`,
each call as JSON or as text the parser reads, WorkBench's `calendar.delete_event.func(...)`
included) or raw text holding several calls. Each output yields one judgement line (a verdict
line plus `execution_success`, `turns`, `truncated`) or an error line `{"id", "error"}`; the
totals go into the same Summary as `verify`'s. Episodes run one at a time, streaming.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from trainer.contracts import Task
from trainer.environments.base import Environment, Judgement
from trainer.verifiers.base import Completion
from trainer.verifiers.batch import Summary, read_outputs


def judge_outputs(environment: Environment, tasks: Sequence[Task], outputs: Sequence[Completion]) -> list[Judgement]:
    """One judgement per output (`tasks[i]` is the task `outputs[i]` answers), even when an episode breaks."""
    if len(tasks) != len(outputs):
        raise ValueError(f"{len(tasks)} tasks but {len(outputs)} outputs")
    return [_guarded(environment, task, output) for task, output in zip(tasks, outputs, strict=True)]


def episode_lines(
    environment: Environment, tasks: Mapping[str, Task], lines: Iterable[str], summary: Summary
) -> Iterator[dict[str, Any]]:
    """One JSON-ready row per output line, in input order, added up into `summary`."""
    for output_id, output, error in read_outputs(lines):
        if error is None and output_id not in tasks:
            error = f"no task with id {output_id}"
        if error is not None or output_id is None:
            summary.input_errors += 1
            yield {"id": output_id, "error": error}
            continue
        judgement = _guarded(environment, tasks[output_id], output)
        summary.add(judgement.verdict())
        yield judgement.to_json()


def _guarded(environment: Environment, task: Task, output: Completion) -> Judgement:
    try:
        return environment.run_output(task, output)
    except Exception as error:  # noqa: BLE001 - every output must get a judgement; the reason says what broke
        return Judgement(
            task_id=task.id,
            reward=environment.floor,
            passed=False,
            reason=f"environment error: {type(error).__name__}: {error}",
            components={"error": environment.floor},
            turns=0,
        )
