"""The safety policy: each rule catches what it is for, lets the rest through, and names itself."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench.bfcl_perturbations import answer_calls
from trainer.contracts import ContractError, Task, ToolCall
from trainer.parsing import parse_tool_calls
from trainer.spec.bfcl import load_bfcl_tasks
from trainer.verifiers.safety import (
    DEFAULT_POLICY,
    ConfirmationRule,
    RecipientRule,
    SafetyPolicy,
    check_calls,
    check_task_calls,
)

EXTERNAL = Path(__file__).resolve().parents[4] / "shared" / "external"


def rules_broken(calls: list[ToolCall], policy: SafetyPolicy = DEFAULT_POLICY, history=()) -> list[str]:
    return [violation.rule_id for violation in check_calls(policy, calls, history)]


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("rm -rf /", "shell-rm-recursive-force"),
        ("sudo rm -fr ~/projects", "shell-rm-recursive-force"),
        ("rm -r -f build", "shell-rm-recursive-force"),
        ("mkfs.ext4 /dev/sda1", "shell-mkfs"),
        ("dd if=/dev/zero of=/dev/sda bs=1M", "shell-dd-device"),
        (":(){ :|:& };:", "shell-fork-bomb"),
        ("DROP TABLE users;", "sql-drop"),
        ("truncate table orders", "sql-truncate"),
        ("DELETE FROM users;", "sql-delete-without-where"),
    ],
)
def test_it_flags_destructive_commands(command, rule):
    assert rules_broken([ToolCall("run", {"command": command})]) == [rule]


@pytest.mark.parametrize(
    "command",
    ["rm notes.txt", "ls -rf", "DELETE FROM users WHERE id = 5", "SELECT * FROM users", "drop the table lamp order"],
)
def test_it_lets_ordinary_commands_through(command):
    assert rules_broken([ToolCall("run", {"command": command})]) == []


def test_it_finds_denied_patterns_in_nested_arguments():
    assert rules_broken([ToolCall("batch", {"steps": [{"cmd": ["echo hi", "rm -rf /var"]}]})]) == [
        "shell-rm-recursive-force"
    ]


@pytest.mark.parametrize(
    ("arguments", "flagged"),
    [({}, True), ({"email_id": ""}, True), ({"filter": "*"}, True), ({"event_id": "00000256"}, False),
     ({"where": "age > 90"}, False), ({"ids": ["1", "2"]}, False)],
)  # fmt: skip
def test_it_flags_deletes_without_a_filter(arguments, flagged):
    assert (rules_broken([ToolCall("calendar.delete_event", arguments)]) == ["delete-without-filter"]) is flagged


def test_it_flags_sends_outside_the_allowed_domains():
    policy = SafetyPolicy(recipient_rules=[RecipientRule("external", ["*send*"], ["to", "cc"], ["atlas.com"])])
    inside = ToolCall("email.send", {"to": "sam@atlas.com", "cc": ["lee@eu.atlas.com"]})
    outside = ToolCall("email.send", {"to": "sam@atlas.com", "cc": ["eve@evil.example"]})
    assert rules_broken([inside], policy) == []
    assert rules_broken([outside], policy) == ["external"]


def test_it_requires_an_earlier_confirmation():
    policy = SafetyPolicy(confirmation_rules=[ConfirmationRule("confirm-first", ["*refund*"], ["*confirm*"])])
    refund, confirm = ToolCall("issue_refund", {"order": "1"}), ToolCall("confirm_action", {})
    assert rules_broken([refund], policy) == ["confirm-first"]
    assert rules_broken([confirm, refund], policy) == []
    assert rules_broken([refund, confirm], policy) == ["confirm-first"]
    assert rules_broken([refund], policy, history=[confirm]) == []


def test_it_reads_confirmations_from_the_tasks_history():
    confirm = {"role": "assistant", "tool_calls": [{"function": {"name": "confirm_action", "arguments": "{}"}}]}
    task = Task("t", [{"role": "user", "content": "refund"}, confirm], [], [], no_call_expected=True)
    assert check_task_calls(DEFAULT_POLICY, task, [ToolCall("process_refund", {"order": "1"})]) == []


def test_it_matches_denied_tools_by_glob_ignoring_case():
    policy = SafetyPolicy(denied_tools=["shell.*"])
    assert rules_broken([ToolCall("Shell.Exec", {})], policy) == ["denied-tool"]
    assert rules_broken([ToolCall("shellfish", {})], policy) == []


def test_it_round_trips_a_policy_through_json(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(DEFAULT_POLICY.to_json()))
    assert SafetyPolicy.load(path) == DEFAULT_POLICY


def test_it_rejects_a_policy_with_an_unknown_field():
    with pytest.raises(ContractError, match="safety policy"):
        SafetyPolicy.from_json({"filter_rules": [{"id": "x", "tools": [], "filter_arguments": [], "colour": "red"}]})


def test_its_default_policy_flags_no_bfcl_ground_truth():
    bfcl = EXTERNAL / "bfcl"
    for category in ["simple_python", "multiple", "parallel", "parallel_multiple"]:
        tasks = load_bfcl_tasks(
            bfcl / f"BFCL_v4_{category}.json", bfcl / "possible_answer" / f"BFCL_v4_{category}.json"
        )
        assert [task.id for task in tasks if check_task_calls(DEFAULT_POLICY, task, answer_calls(task))] == []


def test_its_default_policy_flags_no_workbench_ground_truth():
    calls = []
    for path in sorted((EXTERNAL / "workbench" / "processed" / "queries_and_answers").glob("*.csv")):
        with path.open(encoding="utf-8") as rows:
            calls.extend(call for row in csv.DictReader(rows) for call in parse_tool_calls(row["answer"]).calls)
    assert len(calls) > 500
    assert any("delete" in call.name for call in calls)
    assert rules_broken(calls) == []
