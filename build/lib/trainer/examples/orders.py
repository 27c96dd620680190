"""An example of a team's own environment: a small order desk, judged by its end state.

Name it in a job as `"environment": "trainer.examples.orders:environment"` (with
`"max_turns"` above 1 the model reads each tool's result and acts again); its tasks are
`orders_tasks.jsonl` beside this file. Four tools: `find_customer` (an email to the customer's
order ids), `get_order`, `cancel_order` (only while processing) and `refund_order` (only once
delivered). Most requests name a customer, not an order, so an agent must look the order up
first. An episode passes when the orders end as the task's expected calls leave them and no
call breaks the safety policy. It is the shape to copy: state in `reset`, one method per tool,
`judge` against the expected calls replayed on a fresh state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, ClassVar

from trainer.contracts import OMITTABLE, Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.verifiers.safety import SafetyPolicy, check_task_calls

CUSTOMERS = {
    "ana@example.com": ["A-1001", "A-1003"],
    "ben@example.com": ["B-2001", "B-2002"],
    "chloe@example.com": ["C-3001"],
}
ORDERS = {
    "A-1001": {"item": "desk lamp", "status": "delivered", "placed": "2026-10-02"},
    "A-1003": {"item": "office chair", "status": "delivered", "placed": "2026-11-20"},
    "B-2001": {"item": "monitor arm", "status": "processing", "placed": "2026-11-28"},
    "B-2002": {"item": "keyboard", "status": "shipped", "placed": "2026-11-25"},
    "C-3001": {"item": "webcam", "status": "processing", "placed": "2026-12-01"},
}


class OrderDesk(Environment):
    name: ClassVar[str] = "orders"

    def __init__(self, policy: SafetyPolicy | None = None) -> None:
        self.policy = policy or SafetyPolicy.default()
        self._task: Task | None = None
        self.orders: dict[str, dict[str, Any]] = {}
        self.calls: list[ToolCall] = []

    def reset(self, task: Task) -> None:
        self._task = task
        self.orders = copy.deepcopy(ORDERS)
        self.calls = []

    def step(self, call: ToolCall) -> StepResult:
        self.calls.append(call)
        tool = self._tools().get(call.name)
        if tool is None:
            return StepResult(f"Unknown tool {call.name!r}; the tools are {', '.join(self._tools())}.", False, ok=False)
        try:
            return StepResult(tool(**call.arguments), done=False)
        except (TypeError, KeyError, ValueError) as error:
            return StepResult(f"Error: {error}", done=False, ok=False)

    def judge(self) -> Judgement:
        task = self._current()
        expected = OrderDesk(self.policy)
        expected.reset(task)
        for call in task.expected_calls:
            expected.step(ToolCall(call.name, {k: v[0] for k, v in call.arguments.items() if v[0] != OMITTABLE}))
        differences = [order for order in ORDERS if self.orders[order] != expected.orders[order]]
        unsafe = [violation.rule_id for violation in check_task_calls(self.policy, task, self.calls)]
        reached = not differences
        reason = "the orders end as expected" if reached else f"orders differ: {', '.join(differences)}"
        return Judgement(task_id=task.id, reward=1.0 if reached and not unsafe else 0.0, passed=reached and not unsafe,
                         reason=reason + (f"; unsafe: {', '.join(unsafe)}" if unsafe else ""),
                         components={"execution_success": float(reached)}, turns=len(self.calls), unsafe=unsafe,
                         execution_success=reached)  # fmt: skip

    def _tools(self) -> dict[str, Callable[..., Any]]:
        return {"find_customer": self.find_customer, "get_order": self.get_order, "cancel_order": self.cancel_order,
                "refund_order": self.refund_order}  # fmt: skip

    def find_customer(self, email: str) -> dict[str, Any]:
        if email not in CUSTOMERS:
            raise KeyError(f"no customer with email {email}")
        return {"email": email, "order_ids": CUSTOMERS[email]}

    def get_order(self, order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, **self._order(order_id)}

    def cancel_order(self, order_id: str) -> str:
        order = self._order(order_id)
        if order["status"] != "processing":
            raise ValueError(f"order {order_id} is {order['status']}; only a processing order can be cancelled")
        order["status"] = "cancelled"
        return f"Order {order_id} cancelled."

    def refund_order(self, order_id: str, reason: str = "") -> str:
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ValueError(f"order {order_id} is {order['status']}; only a delivered order can be refunded")
        order["status"] = "refunded"
        return f"Order {order_id} refunded."

    def _order(self, order_id: str) -> dict[str, Any]:
        if order_id not in self.orders:
            raise KeyError(f"no order {order_id}")
        return self.orders[order_id]

    def _current(self) -> Task:
        if self._task is None:
            raise RuntimeError("reset(task) must start an episode before judge")
        return self._task


def environment(policy: SafetyPolicy) -> OrderDesk:
    """The factory a job names: `trainer.examples.orders:environment`."""
    return OrderDesk(policy)
