"""Snapshot exports: native task JSONL (what trainer reads), TRL and NeMo Gym datasets.

- native: one `trainer.contracts.Task` per line, as `python -m trainer` reads it.
- trl: GRPOTrainer/SFTTrainer rows, `prompt` as chat messages plus the columns the reward needs
  (`task_id`, `tools`, `expected_calls`, `no_call_expected`, `order_sensitive`); TRL passes extra
  columns to reward functions as keyword arguments.
- nemo-gym: `responses_create_params` (input items, flat tools) plus `ground_truth` calls with
  JSON-string arguments (the first accepted value of each argument; NeMo Gym has no alternatives)
  and our `expected_calls` for the full answer.

A snapshot of preference pairs has one format, whatever is asked: TRL's conversational
preference lines (`flywheel.datasets.pairs`), as frozen.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from flywheel.datasets.models import SnapshotKind, TaskSetSnapshot
from flywheel.datasets.pairs import pairs_file_name
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
    """One JSON line per task (or pair) of the snapshot, in its order, as it was when the snapshot was taken."""
    if snapshot.kind == SnapshotKind.PAIRS:
        for content in snapshot.pair_items.order_by("position").values_list("content", flat=True):
            yield json.dumps(content, ensure_ascii=False)
        return
    writer = WRITERS[format_name]
    for item in snapshot.items.order_by("position"):
        metadata = {"split": snapshot.split, "bucket": item.bucket or None, "source": item.category or None}
        if format_name == "native":
            metadata = {key: value for key, value in metadata.items() if value}
        yield json.dumps(writer(item.content, metadata), ensure_ascii=False)


def snapshot_file_name(snapshot: TaskSetSnapshot, format_name: str) -> str:
    """A pairs snapshot's file says its split (what a dpo job reads); a task snapshot's, its hash and format."""
    if snapshot.kind == SnapshotKind.PAIRS:
        return pairs_file_name(snapshot.split)
    return f"{snapshot.content_hash[:12]}-{format_name}.jsonl"
