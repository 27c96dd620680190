"""Import Berkeley Function Calling Leaderboard (BFCL) tasks as native Tasks.

A questions file (`BFCL_v4_<category>.json`, JSON Lines despite the name) gives each
task's conversation and functions; a possible-answer file gives, per id, the accepted
values of every argument. Ids are kept. Functions become OpenAI `tools` with JSON Schema
types (float -> number, dict -> object, tuple -> array, any -> untyped); where that loses
what BFCL's checker distinguishes (tuple, any) the original type stays in `x-bfcl-type`.
Questions without an answers file (the irrelevance category) become no-call tasks.
Single-turn categories only: a multi-turn question is refused with its id.
`bfcl_split` is the train / held-out split of simple_python used by the learning run and the demo.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.contracts import ContractError, ExpectedCall, Task, TaskMetadata, read_json_lines
from trainer.spec.tasks import seeded_sample

SPLIT_SEED = 0
HELDOUT_SIZE = 100
_JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
_KEPT_BFCL_TYPES = frozenset({"tuple", "any"})


def load_bfcl_tasks(questions: str | Path, answers: str | Path | None = None) -> list[Task]:
    """Tasks from a BFCL questions file and, for categories with one, its answers file."""
    ground_truth = {row["id"]: row["ground_truth"] for row in read_json_lines(answers)} if answers else None
    tasks = []
    for row in read_json_lines(questions):
        truth = None
        if ground_truth is not None:
            if row["id"] not in ground_truth:
                raise ContractError(f"{answers}: no answer for task {row['id']}")
            truth = ground_truth[row["id"]]
        tasks.append(bfcl_task(row, truth))
    return tasks


def bfcl_task(row: Mapping[str, Any], ground_truth: list[dict[str, Any]] | None) -> Task:
    """One BFCL question (and its answer, or None when no call is correct) as a Task."""
    turns = row["question"]
    if len(turns) != 1:
        raise ContractError(f"task {row['id']}: multi-turn BFCL tasks are not supported")
    expected = [_expected_call(call) for call in ground_truth or []]
    return Task(
        id=row["id"],
        messages=[dict(message) for message in turns[0]],
        tools=[bfcl_tool(function) for function in row["function"]],
        expected_calls=expected,
        no_call_expected=not expected,
        metadata=TaskMetadata(source=f"bfcl:{_category(row['id'])}"),
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


def _expected_call(call: Mapping[str, Any]) -> ExpectedCall:
    if len(call) != 1:
        raise ContractError(f"a BFCL answer entry must name one function, got {sorted(call)}")
    name, arguments = next(iter(call.items()))
    return ExpectedCall(name=name, arguments=dict(arguments))


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
