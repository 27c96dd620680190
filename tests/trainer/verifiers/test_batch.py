"""Scoring a file of outputs: join by id, error rows for lines that cannot be scored, a summary."""

from __future__ import annotations

import json

from tests.trainer.golden_cases import golden_tasks
from trainer.verifiers import get_verifier
from trainer.verifiers.batch import Summary, read_outputs, verify_lines

CALENDAR_OK = {"tool": "calendar.create_event", "args": {"attendee": "Alex", "day": "Tuesday", "time": "14:00"}}


def lines(*rows: object) -> list[str]:
    return [row if isinstance(row, str) else json.dumps(row) for row in rows]


def test_it_reports_lines_it_cannot_score():
    rows = list(read_outputs(lines("{not json", {"id": "a"}, "", {"id": 7, "output": "x"})))
    assert rows == [
        (None, None, "line 1: invalid JSON: Expecting property name enclosed in double quotes"),
        (None, None, "line 2: expected an object with 'id' and 'output'"),
        ("7", "x", None),
    ]


def test_it_scores_outputs_in_order_and_sums_them_up():
    summary = Summary("tool_call")
    outputs = lines(
        {"id": "calendar", "output": json.dumps(CALENDAR_OK)},
        {"id": "missing", "output": "x"},
        {
            "id": "shell",
            "output": {"tool_calls": [{"function": {"name": "run_command", "arguments": '{"command": "rm -rf /"}'}}]},
        },
        {"id": "calendar", "output": "not a call"},
    )
    rows = list(verify_lines(get_verifier("tool_call"), golden_tasks(), outputs, summary))
    assert [row.get("reward", row.get("error")) for row in rows] == [1.0, "no task with id missing", 0.4, -1.0]
    assert summary.to_json() == {
        "verifier": "tool_call", "scored": 3, "passed": 1, "pass_rate": 0.333333, "mean_reward": 0.133333,
        "unparseable_rate": 0.333333, "unsafe_rate": 0.333333, "violations": {"shell-rm-recursive-force": 1},
        "input_errors": 1,
    }  # fmt: skip
