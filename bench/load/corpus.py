"""The load generator's raw material: real agent conversations from ../shared/external turned into variants.

A variant is one conversation as the app stores it (parsed by the app's own openai-chat parser)
with its outcome and the suggestions the app's own rules make for it; the generator stamps
thousands of trajectories from each, with their own ids, times, versions and tokens. Three agents:

- `airline`: tau-bench's 200 real GPT-4o airline conversations (the first 12 messages, the
  policy cut short), as they ended, and with an unrecovered tool error, broken arguments or no
  outcome injected; its catalogue is inferred from the calls, as the app infers tau-bench's;
- `function-caller`: BFCL simple_python and multiple tasks answered with their ground truth,
  twice over a follow-up turn, and with a wrong value, a made-up tool, a missing required
  argument or a tool error; its catalogue is BFCL's declared schemas;
- `workplace`: WorkBench's queries with their ground-truth calls, inferred catalogue.

Not covered: NeMo Gym and OTLP shapes (their rows are the same columns).
"""

from __future__ import annotations

import ast
import csv
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flywheel.ingest.parsers import ParsedTrajectory
from flywheel.ingest.parsers.base import FieldMapping
from flywheel.ingest.parsers.openai_chat import parse

SYSTEM_CHARS = 600
TAU_MESSAGES = 12
_WORKBENCH_CALL = re.compile(r"^(\w+)\.(\w+)\.func\((.*)\)$")


@dataclass
class Variant:
    """One conversation as stored, and how often the generator picks it."""

    agent: str
    parsed: ParsedTrajectory
    weight: float
    task: str  # the source task's id, kept in metadata as the app keeps a record's other fields


def _record(messages: list[dict[str, Any]], outcome: str) -> ParsedTrajectory:
    return parse({"messages": messages, "outcome": outcome}, FieldMapping())


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _assistant_calls(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": calls}


# --- airline: tau-bench -------------------------------------------------------------------


def _tau_window(record: dict[str, Any]) -> list[dict[str, Any]]:
    messages = [dict(message) for message in record["traj"][:TAU_MESSAGES]]
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = messages[0]["content"][:SYSTEM_CHARS]
    # A window must not end on calls whose results it cut off: drop the dangling assistant turn.
    while messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
        messages.pop()
    return messages


def _with_tool_error(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The last tool result turned into an error the agent never recovers from, the conversation cut after it."""
    last = max((i for i, message in enumerate(messages) if message["role"] == "tool"), default=None)
    if last is None:
        return None
    failed = [dict(message) for message in messages[: last + 1]]
    failed[last]["content"] = "Error: the booking service timed out (upstream 504)"
    return [*failed, {"role": "assistant", "content": "I'm sorry, I could not complete that right now."}]


def _with_broken_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The first call's JSON arguments cut short, as a model that ran out of tokens sends them."""
    for index, message in enumerate(messages):
        if message["role"] == "assistant" and message.get("tool_calls"):
            broken = [dict(item) for item in messages]
            call = broken[index]["tool_calls"][0]
            arguments = call["function"]["arguments"]
            broken[index] = {**message, "tool_calls": [_call(call["id"], call["function"]["name"], arguments[:-2])]}
            return broken
    return None


def airline_variants(root: Path) -> list[Variant]:
    records = json.loads((root / "tau_bench" / "gpt-4o-airline.json").read_text())
    variants = []
    for record in records:
        task = f"{record['task_id']}-{record['trial']}"
        window = _tau_window(record)
        real = "success" if record["reward"] > 0 else "failure"
        variants += [Variant("airline", _record(window, real), 0.70, task)]
        variants += [Variant("airline", _record(window, "unknown"), 0.12, task)]
        for injected, weight in ((_with_tool_error(window), 0.12), (_with_broken_arguments(window), 0.06)):
            if injected is not None:
                variants.append(Variant("airline", _record(injected, "failure"), weight, task))
    return variants


# --- function-caller: BFCL ----------------------------------------------------------------


def _bfcl_arguments(truth: dict[str, list[Any]]) -> dict[str, Any]:
    """The first accepted value of each argument; "" means it may be left out, and is."""
    return {name: values[0] for name, values in truth.items() if values and values[0] != ""}


def _bfcl_messages(question: str, name: str, arguments: dict[str, Any], result: str) -> list[dict[str, Any]]:
    encoded = json.dumps(arguments)
    return [
        {"role": "system", "content": "You call the user's functions. Answer with one call, then summarise."},
        {"role": "user", "content": question},
        _assistant_calls([_call("call_1", name, encoded)]),
        {"role": "tool", "tool_call_id": "call_1", "content": result},
        {"role": "assistant", "content": f"Here is the result of {name}: {result}"},
        {"role": "user", "content": "Thanks. Could you run it once more to be sure?"},
        _assistant_calls([_call("call_2", name, encoded)]),
        {"role": "tool", "tool_call_id": "call_2", "content": result},
        {"role": "assistant", "content": "Same answer again, so it is settled."},
    ]


def _bfcl_tasks(root: Path) -> list[tuple[str, str, list[dict[str, Any]], dict[str, Any]]]:
    tasks = []
    for category in ("simple_python", "multiple"):
        questions = (root / "bfcl" / f"BFCL_v4_{category}.json").read_text().splitlines()
        answers = (root / "bfcl" / "possible_answer" / f"BFCL_v4_{category}.json").read_text().splitlines()
        for question_line, answer_line in zip(questions, answers, strict=True):
            question, answer = json.loads(question_line), json.loads(answer_line)
            tasks.append((question["id"], question["question"][0][-1]["content"], question["function"], answer))
    return tasks


def function_caller_variants(root: Path) -> tuple[list[Variant], list[dict[str, Any]]]:
    """The variants and the declared catalogue (BFCL's schemas of every function the tasks offer)."""
    variants, catalogue = [], {}
    for task, question, functions, answer in _bfcl_tasks(root):
        catalogue.update({function["name"]: function for function in functions})
        ((name, truth),) = answer["ground_truth"][0].items()
        arguments = _bfcl_arguments(truth)
        required = [arg for arg in next(f for f in functions if f["name"] == name)["parameters"].get("required", [])]
        ok = json.dumps({"status": "ok", "value": 42})
        variants.append(Variant("function-caller", _record(_bfcl_messages(question, name, arguments, ok), "success"),
                                0.60, task))  # fmt: skip
        wrong = {key: (f"{value}x" if isinstance(value, str) else 0) for key, value in arguments.items()}
        variants.append(Variant("function-caller", _record(_bfcl_messages(question, name, wrong, ok), "failure"),
                                0.15, task))  # fmt: skip
        made_up = _bfcl_messages(question, f"{name}_v2", arguments, ok)
        variants.append(Variant("function-caller", _record(made_up, "failure"), 0.08, task))
        if required:
            missing = {key: value for key, value in arguments.items() if key != required[0]}
            dropped = _record(_bfcl_messages(question, name, missing, ok), "failure")
            variants.append(Variant("function-caller", dropped, 0.07, task))
        error = _bfcl_messages(question, name, arguments, "Error: rate limited by the upstream API")[:5]
        variants.append(Variant("function-caller", _record(error, "failure"), 0.10, task))
    return variants, list(catalogue.values())


# --- workplace: WorkBench -----------------------------------------------------------------


def _workbench_calls(answer: str) -> list[tuple[str, dict[str, Any]]] | None:
    calls = []
    for text in ast.literal_eval(answer):
        match = _WORKBENCH_CALL.match(text)
        if match is None:
            return None
        domain, function, arguments = match.groups()
        try:
            parsed = ast.parse(f"f({arguments})", mode="eval").body
            assert isinstance(parsed, ast.Call)
            values = {keyword.arg: ast.literal_eval(keyword.value) for keyword in parsed.keywords}
        except (SyntaxError, ValueError):
            return None
        calls.append((f"{domain}.{function}", values))
    return calls


def workplace_variants(root: Path) -> list[Variant]:
    variants = []
    for path in sorted((root / "workbench" / "processed" / "queries_and_answers").glob("*.csv")):
        with path.open(newline="") as handle:
            for number, row in enumerate(csv.DictReader(handle)):
                calls = _workbench_calls(row["answer"])
                if calls is None:
                    continue
                messages: list[dict[str, Any]] = [
                    {"role": "system", "content": "You are a workplace assistant with calendar, email, CRM tools."},
                    {"role": "user", "content": row["query"]},
                ]
                for index, (name, arguments) in enumerate(calls):
                    messages.append(_assistant_calls([_call(f"call_{index}", name, json.dumps(arguments))]))
                    messages.append({"role": "tool", "tool_call_id": f"call_{index}", "content": "Done."})
                messages.append({"role": "assistant", "content": "All done."})
                task = f"{path.stem.removesuffix('_queries_and_answers')}-{number}"
                variants.append(Variant("workplace", _record(messages, "success"), 0.75, task))
                failed = [*messages[:-2], {"role": "tool", "tool_call_id": f"call_{len(calls) - 1}",
                                           "content": "Exception: record not found"}]  # fmt: skip
                variants.append(Variant("workplace", _record(failed, "failure"), 0.15, task))
                variants.append(Variant("workplace", _record(messages, "unknown"), 0.10, task))
    return variants


def long_variant(variants: list[Variant], steps: int, rng: random.Random) -> ParsedTrajectory:
    """An airline conversation of about `steps` steps: real turns strung together, as a long support chat is."""
    pool = [variant for variant in variants if variant.agent == "airline" and variant.parsed.outcome == "failure"]
    joined = []
    while len(joined) < steps:
        joined.extend(step for step in rng.choice(pool).parsed.steps if step.kind != "system")
    first = pool[0].parsed
    return ParsedTrajectory(steps=[first.steps[0], *joined[:steps]], outcome="failure",
                            final_result=first.final_result)  # fmt: skip
