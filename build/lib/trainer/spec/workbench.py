"""WorkBench tasks answerable with one call and no lookup, as native tasks, for the baseline.

WorkBench (../shared/external/workbench) pairs workplace requests with the calls that
answer them. Most need a lookup first (an event id, the sender of an email), which a
single-call evaluation cannot do; this keeps the tasks whose answer is exactly one call
and whose every argument value can be read off the request or the facts the system prompt
states (WorkBench's own: today's date and the working hours; plus the company directory):
- the value appears in the request (case-insensitive; `_` and `-` read as spaces);
- a directory address, when the request names its person;
- a date (YYYY-MM-DD, the year of today's date) the request names as "<Month> <day>", and
  for a start time, the hour the request names ("at 3:30", read within working hours);
- a duration in minutes the request gives in minutes or hours.
Requests with a condition ("if ...") are left out: deciding needs a lookup. Each task
offers only its domain's tools (the NeMo Gym workplace schemas, whose names use `_` where
WorkBench's use `.`). Execution in WorkBench's sandbox is not done here.

`workbench_split` splits them for training by WorkBench's `base_template`, so that every
paraphrase of one template lands in one split (used by the learning run and the demo).

`episode_tasks` is WorkBench whole: all 690 tasks, to be played as episodes in the `workbench`
sandbox (lookups first, then the calls that change the state), judged by the end state:
- expected calls: the answer's calls in order; an empty answer expects no change (no call);
- not order-sensitive: the sandbox judges the end state, and no two calls of an answer edit
  the same row (a test plays every answer reversed and reaches the same end state), so an
  agent that makes the same calls in another order has done the task;
- tools: the company directory's lookup, plus every tool (lookups included) of each domain the
  row's `domains` column names and its calls touch. NeMo Gym's workplace assistant offers all 27
  tools to every task, but their schemas take about 9,900 tokens in the demo model's prompt,
  more than its context of 8,192; one domain takes about 1,700-2,200;
- messages: WorkBench's system text (today's date and working hours, as NeMo Gym states it; no
  directory: looking people up is part of the task) and the request.
`workbench_multi_split` splits them by `base_template` like `workbench_split`.
"""

from __future__ import annotations

import ast
import csv
import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from trainer.contracts import EpisodeSetup, ExpectedCall, Task, TaskMetadata, ToolCall, openai_tool
from trainer.parsing import parse_tool_calls

TODAY = date(2023, 11, 30)
SPLIT_SEED = 0
HELDOUT_SHARE = 1 / 3
SYSTEM_TEXT = ("Today's date is Thursday, 2023-11-30 and the current time is 23:59:00. Remember the current date "
               "and time when answering queries. Meetings must not start before 9am or end after 6pm.")
_CONDITION = re.compile(r"\bif\b", re.IGNORECASE)
_AT_TIME = re.compile(r"\bat (\d{1,2})(?::(\d{2}))?\s*(am|pm)?\b", re.IGNORECASE)
_HOURS = re.compile(r"(\d+(?:\.\d+)?)[ -]hours?\b", re.IGNORECASE)
_MINUTES = re.compile(r"(\d+)[ -]minutes?\b", re.IGNORECASE)
_DATE_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):00)?$")
_WORKDAY_START_HOUR = 9


def directory(path: Path) -> list[str]:
    """The company's e-mail addresses (one per line, no header)."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if "@" in line]


def system_text(addresses: Sequence[str]) -> str:
    return f"{SYSTEM_TEXT}\nCompany directory (e-mail addresses): {', '.join(addresses)}."


def tools_by_domain(example_jsonl: Path) -> dict[str, list[dict[str, Any]]]:
    """The workplace tool schemas grouped by domain (the name's prefix, e.g. `calendar`)."""
    first = json.loads(example_jsonl.read_text(encoding="utf-8").splitlines()[0])
    grouped: dict[str, list[dict[str, Any]]] = {}
    for tool in first["responses_create_params"]["tools"]:
        schema = openai_tool(tool)
        name = schema["function"]["name"]
        domain = next((d for d in _DOMAINS if name.startswith(d + "_")), name.split("_", 1)[0])
        grouped.setdefault(domain, []).append(schema)
    return grouped


_DOMAINS = ("customer_relationship_manager", "project_management", "company_directory", "calendar", "email",
            "analytics")
_DOMAIN_ALIASES = {"crm": "customer_relationship_manager"}  # as WorkBench's `domains` column spells one
_DIRECTORY = "company_directory"
ENVIRONMENT = "workbench"
Split = tuple[list[Task], list[Task], dict[str, list[str]]]  # train, held-out, {"train"|"heldout": templates}


def _normal(text: str) -> str:
    return re.sub(r"[_\-\s]+", " ", text.replace("\\n", "\n")).lower()


def value_available(value: Any, request: str, addresses: Sequence[str]) -> bool:
    """Whether the value can be read off the request and the system prompt's facts (see module doc)."""
    text = str(value)
    if _normal(text) in _normal(request):
        return True
    if text in addresses:
        return re.search(rf"\b{re.escape(text.split('.')[0])}\b", request, re.IGNORECASE) is not None
    return _date_named(text, request) or _duration_named(text, request)


def _date_named(text: str, request: str) -> bool:
    found = _DATE_TIME.match(text)
    if not found or int(found[1]) != TODAY.year:
        return False
    day = date(int(found[1]), int(found[2]), int(found[3]))
    if not re.search(rf"\b{day.strftime('%B')} {day.day}(?!\d)", request, re.IGNORECASE):
        return False
    return found[4] is None or (int(found[4]), int(found[5])) in _times_named(request)


def _times_named(request: str) -> set[tuple[int, int]]:
    times = set()
    for hour_text, minute_text, meridiem in _AT_TIME.findall(request):
        hour = int(hour_text) % 12 if meridiem else int(hour_text)
        if meridiem.lower() == "pm" or (not meridiem and hour < _WORKDAY_START_HOUR):
            hour += 12
        times.add((hour, int(minute_text or 0)))
    return times


def _duration_named(text: str, request: str) -> bool:
    if not text.isdigit():
        return False
    minutes = {float(m) for m in _MINUTES.findall(request)} | {float(h) * 60 for h in _HOURS.findall(request)}
    return float(text) in minutes


def answer_calls(answer: str) -> list[ToolCall]:
    """WorkBench's answer column (a Python list of call strings) as calls, with `_` names."""
    calls: list[ToolCall] = []
    for text in ast.literal_eval(answer):
        parsed = parse_tool_calls(text)
        calls.extend(ToolCall(call.name.replace(".", "_"), call.arguments) for call in parsed.calls)
    return calls


def single_call_tasks(external: Path) -> Iterator[Task]:
    """The WorkBench tasks that one call answers with no lookup, in file order."""
    workbench = external / "workbench"
    addresses = directory(workbench / "raw" / "email_addresses.csv")
    tools = tools_by_domain(external / "nemo_gym" / "workplace_assistant" / "example.jsonl")
    for path in sorted((workbench / "processed" / "queries_and_answers").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as rows:
            for number, row in enumerate(csv.DictReader(rows), start=1):
                task = _task(row, f"workbench-{path.stem.removesuffix('_queries_and_answers')}-{number}",
                             addresses, tools)
                if task is not None:
                    yield task


def _task(row: Mapping[str, str], task_id: str, addresses: Sequence[str],
          tools: Mapping[str, list[dict[str, Any]]]) -> Task | None:
    request = row["query"].strip()
    calls = answer_calls(row["answer"])
    if len(calls) != 1 or _CONDITION.search(request):
        return None
    call = calls[0]
    if not all(value_available(value, request, addresses) for value in call.arguments.values()):
        return None
    domain = next(d for d in _DOMAINS if call.name.startswith(d + "_"))
    return Task(
        id=task_id,
        messages=[{"role": "system", "content": system_text(addresses)}, {"role": "user", "content": request}],
        tools=tools[domain],
        expected_calls=[ExpectedCall.exact(call.name, call.arguments)],
        metadata=TaskMetadata(source=f"workbench:{domain}"),
    )


def workbench_templates(external: Path) -> dict[str, str]:
    """Task id (`workbench-<file stem>-<row number>`, as `single_call_tasks` names it) -> base_template."""
    folder = external / "workbench" / "processed" / "queries_and_answers"
    templates: dict[str, str] = {}
    for path in sorted(folder.glob("*.csv")):
        stem = path.stem.removesuffix("_queries_and_answers")
        with path.open(encoding="utf-8", newline="") as rows:
            for number, row in enumerate(csv.DictReader(rows), start=1):
                templates[f"workbench-{stem}-{number}"] = row["base_template"]
    return templates


def episode_tasks(external: Path) -> Iterator[Task]:
    """All WorkBench tasks as episode tasks of the `workbench` sandbox (see module doc), in file order."""
    workbench = external / "workbench"
    tools = tools_by_domain(external / "nemo_gym" / "workplace_assistant" / "example.jsonl")
    for path in sorted((workbench / "processed" / "queries_and_answers").glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as rows:
            for number, row in enumerate(csv.DictReader(rows), start=1):
                yield _episode_task(row, f"workbench-{path.stem.removesuffix('_queries_and_answers')}-{number}", tools)


def _episode_task(row: Mapping[str, str], task_id: str, tools: Mapping[str, list[dict[str, Any]]]) -> Task:
    calls = answer_calls(row["answer"])
    domains = task_domains(row["domains"], calls)
    return Task(
        id=task_id,
        messages=[{"role": "system", "content": SYSTEM_TEXT}, {"role": "user", "content": row["query"].strip()}],
        tools=[tool for domain in (_DIRECTORY, *domains) for tool in tools[domain]],
        expected_calls=[ExpectedCall.exact(call.name, call.arguments) for call in calls],
        no_call_expected=not calls,
        metadata=TaskMetadata(source=f"workbench:{'+'.join(domains)}"),
        episode=EpisodeSetup(environment=ENVIRONMENT),
    )


def task_domains(column: str, calls: Sequence[ToolCall]) -> list[str]:
    """The domains the row's `domains` column names and its calls touch, in `_DOMAINS` order (the directory aside)."""
    named = {_DOMAIN_ALIASES.get(name, name) for name in ast.literal_eval(column)}
    touched = {next(d for d in _DOMAINS if call.name.startswith(d + "_")) for call in calls}
    unknown = named - set(_DOMAINS)
    if unknown:
        raise ValueError(f"unknown WorkBench domain(s) {sorted(unknown)}")
    return [domain for domain in _DOMAINS if domain in (named | touched) - {_DIRECTORY}]


def workbench_split(external: Path) -> Split:
    """(train, held-out, {"train": templates, "heldout": templates}), grouped by base_template."""
    return split_by_template(list(single_call_tasks(external)), workbench_templates(external))


def workbench_multi_split(external: Path) -> Split:
    """All 690 episode tasks as (train, held-out, templates of each), grouped by base_template as `workbench_split`."""
    return split_by_template(list(episode_tasks(external)), workbench_templates(external))


def split_by_template(tasks: Sequence[Task], templates: Mapping[str, str]) -> Split:
    """A seeded third of the tasks' templates (rounded) held out, with every task of a template in its split."""
    names = sorted({templates[task.id] for task in tasks})
    held = set(random.Random(SPLIT_SEED).sample(names, round(len(names) * HELDOUT_SHARE)))
    train = [task for task in tasks if templates[task.id] not in held]
    heldout = [task for task in tasks if templates[task.id] in held]
    split = {
        "train": sorted({templates[task.id] for task in train}),
        "heldout": sorted({templates[task.id] for task in heldout}),
    }
    if set(split["train"]) & set(split["heldout"]):
        raise ValueError("a WorkBench template is in both splits")
    return train, heldout, split
