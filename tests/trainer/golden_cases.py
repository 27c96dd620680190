"""Load the golden verifier cases: tasks.jsonl holds the tasks, <verifier>.jsonl the cases.

A case is `{"case", "task", "output", "reward", "passed"}` (plus an optional agent `policy`),
where `task` names a task in tasks.jsonl and `reward` / `passed` are what the verifier must
return, worked out by hand from the rules in docs/verifiers.md, not by running the code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from trainer.contracts import Task
from trainer.verifiers import get_verifier
from trainer.verifiers.safety import SafetyPolicy

GOLDEN = Path(__file__).resolve().parent / "golden"


@dataclass(frozen=True)
class GoldenCase:
    name: str
    task: Task
    output: Any
    reward: float
    passed: bool
    policy: SafetyPolicy | None


@cache
def golden_tasks() -> dict[str, Task]:
    lines = (GOLDEN / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    return {task.id: task for task in (Task.from_json(json.loads(line)) for line in lines)}


def golden_cases(verifier: str) -> list[GoldenCase]:
    cases = []
    for line in (GOLDEN / f"{verifier}.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        policy = SafetyPolicy.from_json(row["policy"]) if "policy" in row else None
        cases.append(
            GoldenCase(row["case"], golden_tasks()[row["task"]], row["output"], row["reward"], row["passed"], policy)
        )
    return cases


def check_golden(verifier: str, case: GoldenCase) -> None:
    verdict = get_verifier(verifier, case.policy).score(case.task, case.output)
    assert (round(verdict.reward, 6), verdict.passed) == (case.reward, case.passed), verdict.reason
    assert abs(sum(verdict.components.values()) - verdict.reward) < 1e-6
    assert verdict.reason and not verdict.reason.startswith("verifier error")
