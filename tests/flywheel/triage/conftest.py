"""Trajectories for the triage tests: the real tau-bench airline file, and constructed native records."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from flywheel.ingest.models import Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.triage.models import BUILT_IN_BUCKETS, Bucket
from flywheel.triage.services import suggestions_compute
from tests.flywheel.ingest.conftest import TAU_MAPPING, tau_bench_path  # noqa: F401  (a shared fixture)

TAU = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")
SHOP_TOOLS = [
    {
        "name": "refund_order",
        "description": "Refund an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
    },
    {
        "name": "lookup_order",
        "description": "Find an order.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
]


@pytest.fixture
def built_in_buckets() -> None:
    """The data migration's buckets again: transactional tests flush the tables, taking them along."""
    for position, (slug, name, description, colour) in enumerate(BUILT_IN_BUCKETS, start=1):
        defaults = {"name": name, "description": description, "colour": colour, "built_in": True, "position": position}
        Bucket.objects.update_or_create(slug=slug, defaults=defaults)


@pytest.fixture
def tau_airline(tau_bench_path) -> dict[str, Trajectory]:  # noqa: F811
    """The 200 tau-bench airline trajectories, stored and suggested for, by external id ("task:trial")."""
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=TAU)
    suggestions_compute(trajectory_ids=list(Trajectory.objects.values_list("pk", flat=True)))
    return {trajectory.external_id: trajectory for trajectory in Trajectory.objects.all()}


def shop_record(external_id: str, steps: list[dict[str, Any]], *, outcome: str = "failure", **extra: Any) -> dict:
    """A native record of the `shop` agent, with its declared tool schemas."""
    return {"id": external_id, "agent": "shop", "outcome": outcome, "tools": SHOP_TOOLS, "steps": steps, **extra}


@pytest.fixture
def store() -> Callable[..., dict[str, Trajectory]]:
    """store(record, ...) ingests native records and suggests for them; returns them by external id."""

    def ingest(*records: dict[str, Any]) -> dict[str, Trajectory]:
        data = b"".join(json.dumps(record).encode() + b"\n" for record in records)
        stream_ingest(stream=io.BytesIO(data), options=IngestOptions(format="native"))
        ids = [record["id"] for record in records]
        stored = Trajectory.objects.filter(external_id__in=ids)
        suggestions_compute(trajectory_ids=list(stored.values_list("pk", flat=True)))
        return {trajectory.external_id: trajectory for trajectory in stored}

    return ingest


def call(tool: str, arguments: Any, call_id: str = "") -> dict[str, Any]:
    return {"kind": "tool_call", "tool": tool, "arguments": arguments, "call_id": call_id}


def result(tool: str, text: str, *, error: bool = False, call_id: str = "") -> dict[str, Any]:
    return {"kind": "tool_result", "tool": tool, "text": text, "error": error, "call_id": call_id}


def user(text: str = "Please refund order 17.") -> dict[str, Any]:
    return {"kind": "user", "text": text}
