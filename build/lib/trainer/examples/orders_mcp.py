"""The example order desk (`trainer.examples.orders`) as an MCP server over stdio.

Run by a job as `"environment": "mcp:python -m trainer.examples.orders_mcp"`: its four desk
tools become the episode's tools, and the two episode tools that every MCP environment of
ours offers stay hidden from the model: `episode_reset(task)` starts an episode of a task
(the task's JSON line) and `episode_judge()` checks the end state, answering
`{"execution_success": bool, "reason": str}`. A tool that refuses (a wrong order id, a
refund of an undelivered order) answers an error result the model reads, as an MCP client
shows it. One server holds one episode at a time; the environment starts one per episode
it runs side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from trainer.contracts import Task
from trainer.examples.orders import OrderDesk

server = MCPServer("order-desk", log_level="WARNING")  # a refused call is the model's business, not a log line
desk = OrderDesk()
_T = TypeVar("_T")


def _desk(action: Callable[[], _T]) -> _T:
    """The desk's refusal as a tool error the model reads (a bare exception would read "Error executing tool")."""
    try:
        return action()
    except (KeyError, ValueError, TypeError) as error:
        raise ToolError(str(error).strip("'")) from None


@server.tool()
def find_customer(email: str) -> dict[str, Any]:
    """A customer's order ids, by email."""
    return _desk(lambda: desk.find_customer(email))


@server.tool()
def get_order(order_id: str) -> dict[str, Any]:
    """One order: item, status, date placed."""
    return _desk(lambda: desk.get_order(order_id))


@server.tool()
def cancel_order(order_id: str) -> str:
    """Cancel an order that is still processing."""
    return _desk(lambda: desk.cancel_order(order_id))


@server.tool()
def refund_order(order_id: str, reason: str = "") -> str:
    """Refund a delivered order."""
    return _desk(lambda: desk.refund_order(order_id, reason))


@server.tool()
def episode_reset(task: dict[str, Any]) -> str:
    """Start an episode of `task` (a task JSON line) from the desk's starting state."""
    desk.reset(Task.from_json(task))
    return "ready"


@server.tool()
def episode_judge() -> dict[str, Any]:
    """Whether the orders end as the task's expected calls leave them."""
    judged = desk.judge()
    return {"execution_success": bool(judged.execution_success), "reason": judged.reason}


if __name__ == "__main__":
    server.run("stdio")
