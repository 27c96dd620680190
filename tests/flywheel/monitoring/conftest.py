"""Monitoring fixtures: the `shop` agent with declared tools and a safety policy, stored trajectories, versions.

`store(record, ...)` ingests native records (as every ingest path stores them); `shop(id, calls, ...)`
builds one of the shop agent's records; `versions` registers two tiny adapters of the agent and
makes v1 then v2 live, so that v1 is v2's predecessor.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.cache import cache

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.monitoring.services import RuleFields, rule_create
from flywheel.registry import services as registry_services
from flywheel.registry.models import ModelVersion
from flywheel.triage.services import agent_policy_set
from tests.flywheel.registry.conftest import TINY_MODEL, adapters, managed_server, registry_dir  # noqa: F401  (shared fixtures)

SHOP_TOOLS = [
    {"name": "refund_order", "description": "Refund an order.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                    "required": ["order_id", "amount"]}},
    {"name": "lookup_order", "description": "Find an order.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
    {"name": "delete_account", "description": "Close the customer's account.",
     "parameters": {"type": "object", "properties": {}}},
]  # fmt: skip
DENY_DELETES = {"name": "no-deletes", "denied_tools": ["delete_*"]}


def call(tool: str, arguments: Any) -> dict[str, Any]:
    return {"kind": "tool_call", "tool": tool, "arguments": arguments}


SAFE_CALL = call("lookup_order", {"order_id": "A17"})
UNSAFE_CALL = call("delete_account", {})


def shop(external_id: str, calls: list[dict[str, Any]] = (), *, outcome: str = "unknown",  # type: ignore[assignment]
         version: str = "", **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A native record of the `shop` agent: a user turn, then `calls`."""
    steps = [{"kind": "user", "text": "Please help with my order."}, *calls]
    return {"id": external_id, "agent": "shop", "outcome": outcome, "tools": SHOP_TOOLS, "steps": steps,
            "model_version": version, **extra}  # fmt: skip


@pytest.fixture(autouse=True)
def fresh_cache():
    """The checks' debounce keys live in the (process-wide) cache: each test starts without them."""
    cache.clear()


@pytest.fixture
def store(db) -> Callable[..., dict[str, Trajectory]]:
    """store(record, ...) ingests native records; returns them by external id."""

    def ingest(*records: dict[str, Any]) -> dict[str, Trajectory]:
        data = b"".join(json.dumps(record).encode() + b"\n" for record in records)
        stream_ingest(stream=io.BytesIO(data), options=IngestOptions(format="native"))
        stored = Trajectory.objects.filter(external_id__in=[record["id"] for record in records])
        return {trajectory.external_id: trajectory for trajectory in stored}

    return ingest


@pytest.fixture
def agent(store, make_user) -> Agent:
    """The shop agent (its catalogue declared by its first record), with a policy that denies deletes."""
    store(shop("first"))
    agent = Agent.objects.get(name="shop")
    agent_policy_set(actor=make_user(Role.ADMIN), agent=agent, policy=DENY_DELETES)
    return agent


@pytest.fixture
def rule(agent):
    """Every trajectory of the shop agent, all three scorers."""
    return rule_create(actor=None, agent=agent, fields=RuleFields(name="everything"))


@pytest.fixture
def versions(agent, adapters, make_user) -> tuple[ModelVersion, ModelVersion]:  # noqa: F811
    """shop:v1 and shop:v2, promoted in that order (v2 by override: no gate)."""
    approver = make_user(Role.APPROVER)
    made = [registry_services.version_register(actor=None, agent=agent, adapter_dir=adapters[index],
                                                base_model=str(TINY_MODEL)) for index in (0, 1)]  # fmt: skip
    for version in made:
        registry_services.version_promote(actor=approver, version=version, reason="no gate in this test")
    return made[0], made[1]
