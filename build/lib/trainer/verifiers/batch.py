"""Score a file of model outputs against a file of tasks: what `python -m trainer verify` runs.

Tasks are native task JSONL (one `Task.to_json()` a line); outputs are JSONL lines
`{"id": ..., "output": "<raw text>" | {"tool_calls": [...]}}`, joined to tasks by id.
Each output yields one verdict line, or an error line `{"id", "error"}` when the line cannot
be scored (bad JSON, no `output`, an id with no task); the last line is a summary.
Outputs are scored in batches, so files of any length stream through in bounded memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.contracts import Task, Verdict, read_json_lines
from trainer.verifiers.base import UNPARSEABLE_REASON, Completion, Verifier

BATCH_SIZE = 256


@dataclass
class Summary:
    """Totals over a verify run; `to_json` is the final line's payload."""

    verifier: str
    scored: int = 0
    passed: int = 0
    reward_total: float = 0.0
    unparseable: int = 0
    unsafe: int = 0
    input_errors: int = 0
    violations: dict[str, int] = field(default_factory=dict)

    def add(self, verdict: Verdict) -> None:
        self.scored += 1
        self.passed += verdict.passed
        self.reward_total += verdict.reward
        self.unparseable += verdict.reason.startswith(UNPARSEABLE_REASON)
        self.unsafe += bool(verdict.violations)
        for rule in verdict.violations:
            self.violations[rule] = self.violations.get(rule, 0) + 1

    def to_json(self) -> dict[str, Any]:
        share = (lambda count: round(count / self.scored, 6)) if self.scored else (lambda count: 0.0)
        return {
            "verifier": self.verifier,
            "scored": self.scored,
            "passed": self.passed,
            "pass_rate": share(self.passed),
            "mean_reward": round(self.reward_total / self.scored, 6) if self.scored else 0.0,
            "unparseable_rate": share(self.unparseable),
            "unsafe_rate": share(self.unsafe),
            "violations": dict(sorted(self.violations.items())),
            "input_errors": self.input_errors,
        }


def read_tasks(path: str | Path) -> dict[str, Task]:
    """The tasks of a native task JSONL file, by id; a malformed line raises ContractError."""
    return {task.id: task for task in (Task.from_json(row) for row in read_json_lines(path))}


def read_outputs(lines: Iterable[str]) -> Iterator[tuple[str | None, Completion, str | None]]:
    """(id, output, error) per non-blank line; error is set when the line cannot be scored."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            yield None, None, f"line {number}: invalid JSON: {error.msg}"
            continue
        if not isinstance(row, Mapping) or "id" not in row or "output" not in row:
            yield None, None, f"line {number}: expected an object with 'id' and 'output'"
            continue
        yield str(row["id"]), row["output"], None


def verify_lines(
    verifier: Verifier, tasks: Mapping[str, Task], lines: Iterable[str], summary: Summary
) -> Iterator[dict[str, Any]]:
    """One JSON-ready row per output line, in input order, added up into `summary`."""
    pending: list[tuple[Task, Completion]] = []
    for output_id, output, error in read_outputs(lines):
        if error is None and output_id not in tasks:
            error = f"no task with id {output_id}"
        if error is not None:
            yield from _flush(verifier, pending, summary)
            summary.input_errors += 1
            yield {"id": output_id, "error": error}
            continue
        pending.append((tasks[output_id], output))  # type: ignore[index]
        if len(pending) >= BATCH_SIZE:
            yield from _flush(verifier, pending, summary)
    yield from _flush(verifier, pending, summary)


def _flush(verifier: Verifier, pending: list[tuple[Task, Completion]], summary: Summary) -> Iterator[dict[str, Any]]:
    if not pending:
        return
    verdicts = verifier.verify([task for task, _ in pending], [output for _, output in pending])
    pending.clear()
    for verdict in verdicts:
        summary.add(verdict)
        yield verdict.to_json()
