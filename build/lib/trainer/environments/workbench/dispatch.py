"""From a model's tool call to a workplace tool's result, or to the error the model should read.

The call's tool must be one the task offers (a dotted name such as WorkBench's
`calendar.delete_event` is read as `calendar_delete_event`). Its arguments are checked
against the offered schema: an unknown argument is refused, null arguments are dropped (as
NeMo Gym drops them), a number given for a text argument becomes its text (as WorkBench's
replay does) and digits given for an integer become the integer. Every refusal, here or in
the tool, is an Outcome with `ok` false whose observation says why; nothing raises.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

from trainer.contracts import ToolCall
from trainer.environments.workbench.state import WorkbenchState
from trainer.environments.workbench.tools import TOOLS, ToolError

_ACCEPTED = {name: frozenset(inspect.signature(tool).parameters) - {"state"} for name, tool in TOOLS.items()}


@dataclass(frozen=True)
class Outcome:
    """A tool call's observation, and whether the tool ran it (false: refused, observation says why)."""

    observation: Any
    ok: bool


def tool_name(name: str) -> str:
    """The workplace tool a call names, reading WorkBench's dotted names as NeMo Gym's underscored ones."""
    return name.strip().replace(".", "_")


def run_tool(state: WorkbenchState, offered: Mapping[str, Mapping[str, Any]], call: ToolCall) -> Outcome:
    """Run `call` against `state` if `offered` (tool name to parameters schema) allows it."""
    name = tool_name(call.name)
    if name not in offered:
        return Outcome(_unknown_tool(call.name, offered), ok=False)
    if name not in TOOLS:
        return Outcome(f"Error executing tool '{name}': the workplace sandbox has no such tool.", ok=False)
    try:
        arguments = checked_arguments(name, offered[name], call.arguments)
        return Outcome(TOOLS[name](state, **arguments), ok=True)
    except ToolError as refusal:
        return Outcome(str(refusal), ok=False)


def checked_arguments(tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments the tool accepts, coerced to their schema types; ToolError names a bad one."""
    properties = schema.get("properties") or {}
    checked: dict[str, Any] = {}
    for argument, value in arguments.items():
        if value is None:
            continue
        if argument not in properties or argument not in _ACCEPTED[tool]:
            accepted = ", ".join(sorted(properties)) or "none"
            raise ToolError(f"Error executing tool '{tool}': unexpected argument '{argument}'; accepted: {accepted}")
        checked[argument] = _coerced(tool, argument, value, properties[argument].get("type"))
    return checked


def _coerced(tool: str, argument: str, value: Any, kind: str | None) -> Any:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        if isinstance(value, str) or is_number:
            return str(value)
    elif kind == "integer":
        if is_number and float(value).is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
    else:
        return value
    raise ToolError(f"Error executing tool '{tool}': argument '{argument}' must be {kind}, got {type(value).__name__}")


def _unknown_tool(name: str, offered: Mapping[str, Any]) -> str:
    close = get_close_matches(tool_name(name), list(offered), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"Error: unknown tool '{name}'.{hint}"
