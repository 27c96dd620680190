"""Snapshot exports: native task JSONL (what trainer reads), TRL and NeMo Gym datasets.

- native: one `trainer.contracts.Task` per line, as `python -m trainer` reads it.
- trl: GRPOTrainer/SFTTrainer rows, `prompt` as chat messages plus the columns the reward needs
  (`task_id`, `tools`, `expected_calls`, `no_call_expected`, `order_sensitive`); TRL passes extra
  columns to reward functions as keyword arguments.
- nemo-gym: `responses_create_params` (input items, flat tools) plus `ground_truth` calls with
  JSON-string arguments (the first accepted value of each argument; NeMo Gym has no alternatives)
  and our `expected_calls` for the full answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from flywheel.datasets.models import TaskSetSnapshot
from trainer.contracts import OMITTABLE

EXPORT_FORMATS = ("native", "trl", "nemo-gym")


def _native(content: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    return {**content, "metadata": metadata}


def _trl(content: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt": content["messages"],
        "task_id": content["id"],
        "tools": content["tools"],
        "expected_calls": content["expected_calls"],
        "no_call_expected": content["no_call_expected"],
        "order_sensitive": content["order_sensitive"],
        **metadata,
    }


def _first_values(arguments: dict[str, list[Any]]) -> dict[str, Any]:
    return {
        name: next(v for v in values if v != OMITTABLE) for name, values in arguments.items() if values != [OMITTABLE]
    }


def _nemo_gym(content: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    tools = [{"type": "function", **tool["function"]} for tool in content["tools"]]
    ground_truth = [
        {"name": call["name"], "arguments": json.dumps(_first_values(call["arguments"]))}
        for call in content["expected_calls"]
    ]
    return {
        "id": content["id"],
        "responses_create_params": {"input": content["messages"], "tools": tools},
        "ground_truth": ground_truth,
        "expected_calls": content["expected_calls"],
        **metadata,
    }


WRITERS = {"native": _native, "trl": _trl, "nemo-gym": _nemo_gym}


def snapshot_lines(snapshot: TaskSetSnapshot, format_name: str) -> Iterator[str]:
    """One JSON line per task of the snapshot, in its order, as it was when the snapshot was taken."""
    writer = WRITERS[format_name]
    for item in snapshot.items.order_by("position"):
        metadata = {"split": snapshot.split, "bucket": item.bucket or None, "source": item.category or None}
        if format_name == "native":
            metadata = {key: value for key, value in metadata.items() if value}
        yield json.dumps(writer(item.content, metadata), ensure_ascii=False)


NO_PAIRS = "this snapshot has no preference pairs"


def snapshot_preference_lines(snapshot: TaskSetSnapshot) -> list[str]:
    """The snapshot's preference pairs as the lines a dpo job reads (`trainer.spec.pairs`); a ValueError
    (NO_PAIRS) for a snapshot that holds none: a dpo job has nothing else to learn from."""
    lines = list(snapshot_lines(snapshot, "native"))
    if not lines or not all(_is_pair_line(line) for line in lines):
        raise ValueError(NO_PAIRS)
    return lines


def _is_pair_line(line: str) -> bool:
    data = json.loads(line)
    return isinstance(data, dict) and "chosen" in data and "rejected" in data
