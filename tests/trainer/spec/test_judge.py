"""Judge items and the judge job's config: what the app writes and the trainer reads."""

from __future__ import annotations

import json

import pytest

from trainer.spec.config import SpecError, config_from_json
from trainer.spec.judge import JudgeConfig, read_judge_items
from trainer.spec.kinds import config_class
from trainer.verifiers.judge import DEFAULT_RUBRIC

ITEM = {"id": "t1", "messages": [{"role": "user", "content": "Where is order 17?"}], "answer": "It shipped."}


def write(tmp_path, *lines):
    path = tmp_path / "items.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def test_items_are_read_in_order(tmp_path):
    items = read_judge_items([write(tmp_path, ITEM, {**ITEM, "id": "t2", "answer": None})])
    assert [(item.id, item.answer) for item in items] == [("t1", "It shipped."), ("t2", None)]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], "invalid JSON"),
        ([[1, 2]], "must be a JSON object"),
        ([{"id": "x", "messages": []}], "item 1"),
        ([ITEM, ITEM], "repeated: t1"),
        ([], "no item to judge"),
    ],
)
def test_a_bad_items_file_is_refused_with_its_reason(tmp_path, lines, message):
    with pytest.raises(SpecError, match=message):
        read_judge_items([write(tmp_path, *lines)])


def test_a_missing_items_file_is_named(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        read_judge_items([str(tmp_path / "nope.jsonl")])


def test_the_config_is_the_judge_kinds_and_defaults_to_the_default_rubric_greedy():
    assert config_class("judge") is JudgeConfig
    config = config_from_json(JudgeConfig, {"device": "cpu", "batch_size": 2}, "judge")
    assert config.parsed_rubric() == DEFAULT_RUBRIC and config.sampling(3).greedy and config.sampling(3).batch_size == 2


@pytest.mark.parametrize(
    "bad",
    [{"rubric": {"criteria": "c"}}, {"rubric": "be nice"}, {"batch_size": 0}, {"max_transcript_chars": 10},
     {"temperature": 0.7}],
)  # fmt: skip
def test_bad_hyperparameters_are_refused(bad):
    with pytest.raises(SpecError):
        config_from_json(JudgeConfig, bad, "judge")
