"""Replay cases and the replay job's config: what the app writes and the trainer reads."""

from __future__ import annotations

import json

import pytest

from trainer.spec.config import SpecError, config_from_json
from trainer.spec.replay import ReplayCase, ReplayConfig, read_replay_cases

MESSAGES = [{"role": "user", "content": "hi"}]


def test_a_case_without_an_expected_answer_renders_as_a_task_that_expects_no_call():
    case = ReplayCase.from_json({"id": "c", "messages": MESSAGES, "tools": [], "expected": None, "original": None})
    task = case.task()
    assert not case.has_expected and task.no_call_expected and task.messages == MESSAGES
    assert ReplayCase.from_json(case.to_json()) == case


def test_a_case_with_an_expected_answer_is_judged_against_it():
    expected = {"expected_calls": [{"name": "f", "arguments": {"x": [1]}}], "order_sensitive": False}
    case = ReplayCase.from_json({"id": "c", "messages": MESSAGES, "tools": [], "expected": expected})
    assert case.has_expected and case.task().expected_calls[0].name == "f" and not case.task().no_call_expected


@pytest.mark.parametrize("line", [
    {"messages": MESSAGES},
    {"id": "c", "messages": []},
    {"id": "c", "messages": MESSAGES, "expected": {"expected_calls": [], "surprise": 1}},
    {"id": "c", "messages": MESSAGES, "expected": {"expected_calls": []}},  # neither calls nor "no call"
    {"id": "c", "messages": MESSAGES, "original": "text"},
])  # fmt: skip
def test_a_bad_case_is_refused_naming_its_line(tmp_path, line):
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(SpecError, match="case 1"):
        read_replay_cases([str(path)])


def test_no_case_at_all_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(SpecError, match="no replay case"):
        read_replay_cases([str(tmp_path / "empty.jsonl")])


def test_the_config_decodes_greedily_by_default_and_checks_its_values():
    config = config_from_json(ReplayConfig, {"device": "cpu"}, "replay")
    assert config.sampling(seed=3).greedy and config.sampling(seed=3).seed == 3
    for bad in ({"backend": "magic"}, {"max_new_tokens": 0}, {"top_p": 0}, {"surprise": 1}):
        with pytest.raises(SpecError):
            config_from_json(ReplayConfig, bad, "replay")
