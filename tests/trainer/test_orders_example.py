"""The example order desk as a team's environment: episodes that must read tool results to succeed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.trainer.test_eval_job import run_in_process
from tests.trainer.tiny_model import write_spec
from trainer.environments import make_environment
from trainer.evaluate import Evaluation, evaluate_episodes
from trainer.rollout import Generation
from trainer.spec.eval import EvalConfig, SamplingConfig
from trainer.spec.tasks import load_tasks
from trainer.verifiers import SafetyPolicy, get_verifier

TASKS = Path(__file__).resolve().parents[2] / "trainer" / "examples" / "orders_tasks.jsonl"
ENTRY_POINT = "trainer.examples.orders:environment"


def tool_call(name, **arguments):
    return Generation(
        text=f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>",
        prompt_tokens=50,
        completion_tokens=10,
        finished=True,
        latency_s=0.1,
    )


class DeskAgent:
    """Looks the customer up, reads each order, then acts on the one the request describes; `reads=False` guesses."""

    name = "scripted"

    def __init__(self, reads=True):
        self.reads = reads

    def generate(self, prompts, sampling, hooks=None):
        return [[self.answer(json.loads(prompt))] for prompt in prompts]

    def answer(self, messages):
        request = next(m["content"] for m in messages if m["role"] == "user")
        seen = [json.loads(m["content"]) for m in messages if m["role"] == "tool" and m["content"].startswith("{")]
        action = "cancel_order" if "ancel" in request else "refund_order"
        if any(m["role"] == "tool" and m["content"].startswith("Order ") for m in messages):
            return Generation(text="Done.", prompt_tokens=50, completion_tokens=2, finished=True, latency_s=0.1)
        if not seen:
            return tool_call("find_customer", email=re.search(r"[\w.]+@[\w.]+\.com", request).group(0))
        ids = seen[0]["order_ids"]
        if not self.reads:
            return tool_call(action, order_id=ids[0])
        orders = {order["order_id"]: order for order in seen[1:]}
        if missing := [order_id for order_id in ids if order_id not in orders]:
            return tool_call("get_order", order_id=missing[0])
        return tool_call(action, order_id=self.pick(request, action, list(orders.values()))["order_id"])

    @staticmethod
    def pick(request, action, orders):
        named = [order for order in orders if order["item"] in request]
        if named:
            return named[0]
        wanted = "processing" if action == "cancel_order" else "delivered"
        return max((order for order in orders if order["status"] == wanted), key=lambda order: order["placed"])


def evaluate(agent):
    policy = SafetyPolicy.default()
    run = Evaluation(
        backend=agent,
        render=lambda task: json.dumps(task.messages),
        verifier=get_verifier("binary"),
        policy=policy,
        environment=make_environment(ENTRY_POINT, policy=policy),
    )
    budget = EvalConfig(environment=ENTRY_POINT, max_turns=6).episode_budget()
    return evaluate_episodes(load_tasks([TASKS]), run, SamplingConfig(), budget)


def test_an_agent_that_reads_the_tool_results_solves_every_order_task():
    results = evaluate(DeskAgent())
    assert [r.execution_success for r in results] == [True] * 6, [r.verdict["reason"] for r in results]
    assert all(r.ended == "answered" and r.turns >= 3 for r in results)


def test_an_agent_that_ignores_the_tool_results_fails_where_the_order_must_be_looked_up():
    results = evaluate(DeskAgent(reads=False))
    solved = [r.task_id for r in results if r.execution_success]
    assert solved == ["orders-refund-lamp-ana", "orders-cancel-processing-ben", "orders-cancel-chloe",
                      "orders-cancel-monitor-arm"]  # the first order happened to be the right one  # fmt: skip
    assert "orders differ: A-1001, A-1003" in results[0].verdict["reason"]


def test_an_eval_job_runs_episodes_in_the_teams_environment(tmp_path, capfd):
    spec = write_spec(
        tmp_path / "run.json",
        task_paths=[str(TASKS)],
        hyperparameters={"environment": ENTRY_POINT, "max_turns": 2, "max_new_tokens": 16},
    )
    code, events = run_in_process(spec, capfd)
    assert code == 0, events[-1]
    assert events[-1]["metrics"]["tasks"] == 6 and events[-1]["metrics"]["execution_success_rate"]["n"] == 6


def test_an_eval_job_with_a_broken_entry_point_stops_before_loading_a_model(tmp_path, capfd):
    spec = write_spec(
        tmp_path / "run.json",
        task_paths=[str(TASKS)],
        hyperparameters={"environment": "trainer.examples.orders:no_such_factory", "max_turns": 2},
    )
    code, events = run_in_process(spec, capfd)
    assert code != 0 and events[-1]["event"] == "error" and events[-1]["kind"] == "bad_spec"
    assert "trainer.examples.orders has no no_such_factory" in events[-1]["message"]
    assert not any(e["event"] == "log" and e["message"].startswith("model ready") for e in events)
