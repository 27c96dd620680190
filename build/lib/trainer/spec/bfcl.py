"""Import Berkeley Function Calling Leaderboard (BFCL) tasks as native Tasks.

A questions file (`BFCL_v4_<category>.json`, JSON Lines despite the name) gives each
task's conversation and functions; a possible-answer file gives, per id, the accepted
values of every argument. Ids are kept. Functions become OpenAI `tools` with JSON Schema
types (float -> number, dict -> object, tuple -> array, any -> untyped); where that loses
what BFCL's checker distinguishes (tuple, any) the original type stays in `x-bfcl-type`.
Questions without an answers file (the irrelevance category) become no-call tasks.

Every task is read back through the task-file loader (`trainer.spec.tasks.task_from_line`)
before it is returned, so nothing is written that a job would refuse. An answer that lists no
accepted value at all for an argument (`[]`, as 2 of live_simple's 258 answers do, where
BFCL's own checker then fails every answer: omitting the argument needs `""` in the list, and
no value is in an empty one) is read as what the answers file writes elsewhere for the same
function: the argument may be omitted or given its schema default (`["", default]`), when the
schema makes it optional; for a required argument no answer can pass, and the question is
skipped. `import_bfcl` skips each question it cannot convert, with its reason (so does a
multi-turn question: single-turn categories only); `load_bfcl_tasks` refuses the file instead.
`bfcl_split` is the train / held-out split of simple_python used by the learning run and the demo.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contracts import OMITTABLE, ContractError, ExpectedCall, Task, TaskMetadata, read_json_lines
from trainer.spec.tasks import seeded_sample, task_from_line

SPLIT_SEED = 0
HELDOUT_SIZE = 100
_JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
_KEPT_BFCL_TYPES = frozenset({"tuple", "any"})


@dataclass(frozen=True)
class SkippedQuestion:
    """A BFCL question that did not become a task, and why."""

    id: str
    reason: str


@dataclass(frozen=True)
class BfclImport:
    """The tasks converted from a questions file, in order, and the questions skipped."""

    tasks: list[Task]
    skipped: list[SkippedQuestion]


def import_bfcl(questions: str | Path, answers: str | Path | None = None) -> BfclImport:
    """Tasks from a BFCL questions file and, for categories with one, its answers file; bad questions skipped."""
    ground_truth = {str(row["id"]): row["ground_truth"] for row in read_json_lines(answers)} if answers else None
    tasks: list[Task] = []
    skipped: list[SkippedQuestion] = []
    for row in read_json_lines(questions):
        task_id = str(row.get("id")) if isinstance(row, Mapping) else "?"
        try:
            if ground_truth is not None and task_id not in ground_truth:
                raise ContractError(f"{answers}: no answer for task {task_id}")
            tasks.append(bfcl_task(row, ground_truth[task_id] if ground_truth is not None else None))
        except ContractError as error:
            skipped.append(SkippedQuestion(task_id, str(error)))
    return BfclImport(tasks, skipped)


def load_bfcl_tasks(questions: str | Path, answers: str | Path | None = None) -> list[Task]:
    """Every question of a BFCL file as a task; a question that cannot be converted is a ContractError."""
    imported = import_bfcl(questions, answers)
    if imported.skipped:
        raise ContractError(imported.skipped[0].reason)
    return imported.tasks


def bfcl_task(row: Mapping[str, Any], ground_truth: list[dict[str, Any]] | None) -> Task:
    """One BFCL question (and its answer, or None when no call is correct) as a Task the loader accepts.

    A ContractError, naming the task, says why the question cannot be one.
    """
    if not isinstance(row, Mapping):
        raise ContractError(f"a BFCL question must be a JSON object, got {type(row).__name__}")
    where = f"task {row.get('id')}"
    try:
        task = _converted(row, ground_truth)
        return task_from_line(task.to_json_line())
    except KeyError as error:
        raise ContractError(f"{where}: missing {error.args[0]!r}") from None
    except (ContractError, TypeError, AttributeError) as error:
        message = str(error)
        raise ContractError(message if message.startswith(f"{where}:") else f"{where}: {message}") from None


def _converted(row: Mapping[str, Any], ground_truth: list[dict[str, Any]] | None) -> Task:
    turns = row["question"]
    if len(turns) != 1:
        raise ContractError("multi-turn BFCL tasks are not supported")
    if ground_truth is not None and not isinstance(ground_truth, list):
        raise ContractError("the answer's ground_truth must be a list of calls")
    functions = {function["name"]: function.get("parameters") or {} for function in row["function"]}
    expected = [_expected_call(call, functions) for call in ground_truth or []]
    return Task(
        id=row["id"],
        messages=[dict(message) for message in turns[0]],
        tools=[bfcl_tool(function) for function in row["function"]],
        expected_calls=expected,
        no_call_expected=not expected,
        metadata=TaskMetadata(source=f"bfcl:{_category(str(row['id']))}"),
    )


def bfcl_tool(function: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL function description as an OpenAI tool with JSON Schema types."""
    tool = {key: value for key, value in function.items() if key != "parameters"}
    tool["parameters"] = json_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    return {"type": "function", "function": tool}


def json_schema(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema rewritten with JSON Schema types, recursively."""
    converted: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "type":
            converted.update(_converted_type(value))
        elif key == "properties" and isinstance(value, Mapping):
            converted[key] = {name: json_schema(child) for name, child in value.items()}
        elif key == "items" and isinstance(value, Mapping):
            converted[key] = json_schema(value)
        else:
            converted[key] = value
    return converted


def _converted_type(bfcl_type: Any) -> dict[str, Any]:
    if not isinstance(bfcl_type, str):
        return {"type": bfcl_type}
    converted: dict[str, Any] = {}
    if bfcl_type != "any":
        converted["type"] = _JSON_SCHEMA_TYPES.get(bfcl_type, bfcl_type)
    if bfcl_type in _KEPT_BFCL_TYPES:
        converted["x-bfcl-type"] = bfcl_type
    return converted


def _expected_call(call: Any, functions: Mapping[str, Mapping[str, Any]]) -> ExpectedCall:
    if not isinstance(call, Mapping) or len(call) != 1:
        shown = sorted(call) if isinstance(call, Mapping) else json.dumps(call)[:80]
        raise ContractError(f"a BFCL answer entry must be an object naming one function, got {shown}")
    name, arguments = next(iter(call.items()))
    if not isinstance(arguments, Mapping):
        raise ContractError(f"the answer for {name} must map its arguments to accepted values")
    parameters = functions.get(name) or {}
    return ExpectedCall(name=name, arguments={key: accepted_values(name, key, values, parameters)
                                              for key, values in arguments.items()})  # fmt: skip


def accepted_values(function: str, argument: str, values: Any, parameters: Mapping[str, Any]) -> list[Any]:
    """An argument's accepted values; an empty list becomes "omitted, or the default" where the schema allows it."""
    if not isinstance(values, list):
        raise ContractError(f"argument '{argument}' of {function}: the answer must list accepted values")
    if values:
        return list(values)
    schema = (parameters.get("properties") or {}).get(argument)
    if not isinstance(schema, Mapping) or argument in (parameters.get("required") or []):
        why = "is required" if isinstance(schema, Mapping) else "is not in the function's schema"
        raise ContractError(f"argument '{argument}' of {function} {why} and the answer accepts no value for it "
                            "(an empty list): no answer could pass")
    return [OMITTABLE, schema["default"]] if "default" in schema else [OMITTABLE]


def _category(task_id: str) -> str:
    return task_id.rsplit("_", 1)[0]


def bfcl_split(external: Path) -> tuple[list[Task], list[Task]]:
    """(train, held-out) of BFCL simple_python: the held-out set is the committed baseline's seeded sample of 100."""
    tasks = load_bfcl_tasks(
        external / "bfcl" / "BFCL_v4_simple_python.json",
        external / "bfcl" / "possible_answer" / "BFCL_v4_simple_python.json",
    )
    heldout = seeded_sample(tasks, HELDOUT_SIZE, SPLIT_SEED)
    held_ids = {task.id for task in heldout}
    return [task for task in tasks if task.id not in held_ids], heldout
