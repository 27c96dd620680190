"""Readers that turn task files into native Tasks, one candidate per record with its line number.

Formats: `bfcl` (a BFCL question file, answers from the `possible_answer/` folder beside it),
`workbench` (WorkBench `queries_and_answers/*.csv`, tools from NeMo Gym's workplace assistant),
`nemo-gym` (`example.jsonl`: `responses_create_params` plus ground truth in any of the three
shapes NeMo Gym's environments use) and `native` (trainer's task JSONL). A bad record becomes a
candidate with an error; the others are read on. Nothing here writes to the database.
"""

from __future__ import annotations

import ast
import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from trainer.contracts import ContractError, ExpectedCall, Task, TaskMetadata, openai_tool
from trainer.parsing import parse_tool_calls
from trainer.spec.bfcl import bfcl_task

FORMATS = ("bfcl", "workbench", "nemo-gym", "native")
# WorkBench's sandbox clock, as its tasks and NeMo Gym's workplace assistant state it.
WORKBENCH_SYSTEM = (
    "Today's date is Thursday, 2023-11-30 and the current time is 23:59:00. Remember the current date and time "
    "when answering queries. Meetings must not start before 9am or end after 6pm."
)


@dataclass
class Candidate:
    line: int
    task: Task | None = None
    error: str = ""
    template: str = ""  # the source's template, the leakage key where there is one
    category: str = ""
    environment: str = "single_step"


class ImportFileError(ValueError):
    """The file as a whole cannot be read (missing, or its answers file is broken)."""


def read(path: Path, format_name: str) -> Iterator[Candidate]:
    if not path.is_file():
        raise ImportFileError(f"{path} is not a file")
    readers = {"bfcl": _bfcl, "workbench": _workbench, "nemo-gym": _nemo_gym, "native": _native}
    if format_name not in readers:
        raise ImportFileError(f"unknown format {format_name!r}; choose one of {', '.join(FORMATS)}")
    return readers[format_name](path)


def _json_lines(path: Path) -> Iterator[tuple[int, Any, str]]:
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line), ""
            except ValueError as exc:
                yield number, None, f"not valid JSON: {exc}"


def _bfcl(path: Path) -> Iterator[Candidate]:
    answers_path = path.parent / "possible_answer" / path.name
    answers: dict[str, Any] | None = None
    if answers_path.is_file():
        answers = {}
        for number, row, error in _json_lines(answers_path):
            if error or not isinstance(row, dict) or "id" not in row:
                raise ImportFileError(f"{answers_path}:{number}: {error or 'not an answer object'}")
            answers[row["id"]] = row.get("ground_truth")
    for number, row, error in _json_lines(path):
        if error:
            yield Candidate(number, error=error)
            continue
        try:
            truth = None if answers is None else answers[row["id"]]
            task = bfcl_task(row, truth)
        except KeyError as exc:
            yield Candidate(number, error=f"missing {exc.args[0]!r} (question field or its answer)")
        except (ContractError, TypeError, ValueError) as exc:
            yield Candidate(number, error=str(exc))
        else:
            yield Candidate(number, task, category=str(row["id"]).rsplit("_", 1)[0])


def workplace_tools() -> list[dict[str, Any]]:
    path = settings.SHARED_EXTERNAL_DIR / "nemo_gym" / "workplace_assistant" / "example.jsonl"
    with path.open() as handle:
        tools = json.loads(handle.readline())["responses_create_params"]["tools"]
    return [openai_tool(tool) for tool in tools]


def workbench_calls(answer: str, known: set[str]) -> list[ExpectedCall]:
    """WorkBench's answer column (a Python list of call strings) as expected calls."""
    try:
        texts = ast.literal_eval(answer)
    except (ValueError, SyntaxError) as exc:
        raise ContractError(f"the answer is not a Python list of calls: {exc}") from exc
    calls = []
    for text in texts:
        parsed = parse_tool_calls(text)
        if not parsed.calls:
            raise ContractError(f"cannot read the call {text!r}: {parsed.error}")
        for call in parsed.calls:
            name = call.name.replace(".", "_")
            if name not in known:
                raise ContractError(f"{name} is not one of the workplace tools")
            calls.append(ExpectedCall.exact(name, call.arguments))
    return calls


def _workbench(path: Path) -> Iterator[Candidate]:
    tools = workplace_tools()
    known = {tool["function"]["name"] for tool in tools}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle)
        for index, row in enumerate(rows):
            number = rows.line_num
            try:
                calls = workbench_calls(row["answer"], known)
                task = Task(
                    id=f"{path.stem.removesuffix('_queries_and_answers')}_{index}",
                    messages=[
                        {"role": "system", "content": WORKBENCH_SYSTEM},
                        {"role": "user", "content": row["query"]},
                    ],
                    tools=tools,
                    expected_calls=calls,
                    no_call_expected=not calls,
                    order_sensitive=True,
                )
            except (ContractError, KeyError) as exc:
                yield Candidate(number, error=str(exc))
                continue
            domains = row.get("domains", "")
            yield Candidate(
                number, task, template=row.get("base_template", ""), category=domains, environment="workbench"
            )


def _nemo_expected(row: dict[str, Any]) -> list[ExpectedCall]:
    if "ground_truth" in row:
        raw = row["ground_truth"]
    elif "expected_answers" in row:
        raw = row["expected_answers"]
    elif "expected_action" in row:
        raw = [row["expected_action"]] if row["expected_action"].get("type") == "function_call" else []
    else:
        raise ContractError("no ground_truth, expected_answers or expected_action")
    calls = []
    for call in raw:
        arguments = json.loads(call["arguments"]) if isinstance(call.get("arguments"), str) else call.get("arguments")
        calls.append(ExpectedCall.exact(call["name"], arguments or {}))
    return calls


def _nemo_gym(path: Path) -> Iterator[Candidate]:
    for number, row, error in _json_lines(path):
        if error:
            yield Candidate(number, error=error)
            continue
        try:
            params = row["responses_create_params"]
            messages = [{"role": m["role"], "content": m["content"]} for m in params["input"] if m.get("role")]
            calls = _nemo_expected(row)
            task = Task(
                id=str(row.get("id", number)),
                messages=messages,
                tools=[openai_tool(tool) for tool in params.get("tools", [])],
                expected_calls=calls,
                no_call_expected=not calls,
                metadata=TaskMetadata(source=str(path.parent.name)),
            )
        except (ContractError, KeyError, TypeError, ValueError) as exc:
            yield Candidate(number, error=f"{type(exc).__name__}: {exc}")
            continue
        yield Candidate(number, task, category=str(row.get("category", path.parent.name)))


def _native(path: Path) -> Iterator[Candidate]:
    for number, row, error in _json_lines(path):
        if error:
            yield Candidate(number, error=error)
            continue
        try:
            task = Task.from_json(row)
        except (ContractError, TypeError, ValueError, AttributeError) as exc:
            yield Candidate(number, error=str(exc))
            continue
        yield Candidate(number, task)
