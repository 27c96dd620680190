"""Agents' tool catalogues, from the schemas trajectories carry or inferred from the calls they make.

Declared schemas (Responses `tools`, native `tools`, OTLP attributes) replace same-named entries
and make the catalogue "uploaded". An agent whose logs carry no schemas (tau-bench's do not) gets
a catalogue inferred from observed calls: tool names, argument names and the JSON types seen,
marked "inferred" and editable by admins like any other.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db import transaction

from flywheel.core.models import Agent
from flywheel.ingest.parsers import ParsedTrajectory
from trainer.verifiers.schema import json_type

Observed = dict[str, dict[str, set[str]]]  # tool name -> argument name -> JSON types seen


def observe_calls(parsed: ParsedTrajectory, into: Observed) -> None:
    for step in parsed.steps:
        if step.kind != "tool_call" or not step.tool_name:
            continue
        arguments = into.setdefault(step.tool_name, defaultdict(set))
        if isinstance(step.tool_arguments, dict):
            for name, value in step.tool_arguments.items():
                arguments[name].add(json_type(value))


def _inferred_schema(name: str, arguments: dict[str, set[str]], known: dict[str, Any] | None) -> dict[str, Any]:
    properties = dict((known or {}).get("function", {}).get("parameters", {}).get("properties", {}))
    for argument, types in arguments.items():
        seen = set(types)
        previous = properties.get(argument, {}).get("type", [])
        seen.update([previous] if isinstance(previous, str) else previous)
        ordered = sorted(seen)
        properties[argument] = {"type": ordered[0] if len(ordered) == 1 else ordered}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "Inferred from observed calls.",
            "parameters": {"type": "object", "properties": dict(sorted(properties.items()))},
        },
    }


def catalogue_merge(agent: Agent, declared: list[dict[str, Any]], observed: Observed) -> bool:
    """Fold declared schemas and observed calls into `agent.tools`; True when it changed."""
    before = (agent.tools, agent.tools_source)
    by_name = {tool["function"]["name"]: tool for tool in agent.tools}
    if declared:
        by_name.update({tool["function"]["name"]: tool for tool in declared})
        agent.tools_source = Agent.ToolsSource.UPLOADED
    elif agent.tools_source == Agent.ToolsSource.INFERRED:
        for name, arguments in observed.items():
            by_name[name] = _inferred_schema(name, arguments, by_name.get(name))
    agent.tools = [by_name[name] for name in sorted(by_name)]
    return (agent.tools, agent.tools_source) != before


def catalogues_update(*, declared: dict[str, list[dict[str, Any]]], observed: dict[str, Observed]) -> None:
    """Apply one batch's tools per agent name, locking each agent row so concurrent batches add up.

    An agent whose catalogue already holds everything the batch brings is only read: steady
    ingest of a known agent takes no lock and writes nothing. Names go in order, so two batches
    locking the same agents never deadlock.
    """
    for name in sorted(set(declared) | set(observed)):
        if not catalogue_merge(Agent.objects.get(name=name), declared.get(name, []), observed.get(name, {})):
            continue
        with transaction.atomic():
            agent = Agent.objects.select_for_update().get(name=name)
            if catalogue_merge(agent, declared.get(name, []), observed.get(name, {})):
                agent.save(update_fields=["tools", "tools_source", "updated_at"])
