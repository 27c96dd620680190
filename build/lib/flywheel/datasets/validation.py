"""Checks a task must pass before it is saved: a user message, expected calls that fit their tools,
and for a replay episode a recording the replay can read.

Structural problems (no user message, an unknown tool, a missing required argument, an argument
the schema forbids) always refuse a task. A value that does not fit its argument's type or enum
refuses a task written in the app, but only flags one imported from a benchmark: BFCL's own
answers break their schemas in a few places (enum spellings its checker normalises away, answers
nesting alternatives, `null` for an optional number), and those tasks are still what BFCL scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from flywheel.datasets.models import Environment
from trainer.contracts import OMITTABLE, ContractError, Task
from trainer.environments.replay import recorded_calls


@dataclass
class Problems:
    structural: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)

    def refusals(self, *, strict: bool) -> list[str]:
        return self.structural + self.values if strict else self.structural


def task_problems(task: Task) -> Problems:
    """What is wrong with the task, in words; both lists empty when nothing is."""
    problems = Problems()
    if not any(message.get("role") == "user" for message in task.messages):
        problems.structural.append("the task has no user message")
    for call in task.expected_calls:
        schema = task.tool_schemas.get(call.name)
        if schema is None:
            problems.structural.append(f"expected call {call.name}: no such tool among the task's tools")
        else:
            _call_problems(call.name, call.arguments, schema, problems)
    if task.episode is not None and task.episode.environment == Environment.REPLAY:
        try:
            recorded_calls(task)
        except ContractError as exc:
            problems.structural.append(str(exc))
    return problems


def _call_problems(name: str, arguments: dict[str, list[Any]], schema: dict[str, Any], problems: Problems) -> None:
    properties = schema.get("properties") or {}
    problems.structural.extend(
        f"expected call {name}: required argument {required} is missing"
        for required in schema.get("required") or []
        if required not in arguments or arguments[required] == [OMITTABLE]
    )
    for argument, alternatives in arguments.items():
        spec = properties.get(argument)
        if spec is None:
            if schema.get("additionalProperties") is False:
                problems.structural.append(f"expected call {name}: {argument} is not an argument of the tool")
            continue
        for value in alternatives:
            problem = _value_problem(value, spec)
            if problem is not None:
                problems.values.append(f"expected call {name}: {argument}={value!r} does not fit its schema: {problem}")


def _value_problem(value: Any, spec: dict[str, Any]) -> str | None:
    """Why an accepted value does not fit; BFCL nests alternatives inside objects, checked key by key."""
    if value == OMITTABLE:
        return None
    nested = spec.get("properties")
    if isinstance(value, dict) and isinstance(nested, dict) and all(isinstance(v, list) for v in value.values()):
        for key, alternatives in value.items():
            for alternative in alternatives:
                problem = _value_problem(alternative, nested.get(key) or {})
                if problem is not None:
                    return f"{key}: {problem}"
        return None
    error = next(iter(Draft202012Validator(spec).iter_errors(value)), None)
    return None if error is None else error.message
