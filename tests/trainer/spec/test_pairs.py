"""Preference pair files: TRL's conversational preference format, one answer each way, bad lines skipped or refused."""

from __future__ import annotations

import json

import pytest

from tests.trainer.tiny_model import FIXTURES
from trainer.spec.config import SpecError
from trainer.spec.pairs import read_pair_files

PAIRS = FIXTURES / "preference_pairs.jsonl"
GOOD = {"id": "p", "prompt": [{"role": "user", "content": "Weather in Oslo?"}],
        "chosen": [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}],
        "rejected": [{"role": "assistant", "content": "It is sunny."}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]}  # fmt: skip


def test_the_fixture_s_pairs_are_read_in_order_with_their_tools():
    files = read_pair_files([str(PAIRS)], strict=True)
    assert [pair.id for pair in files.pairs] == ["pair-area", "pair-factorial", "pair-weather", "pair-refund",
                                                 "pair-no-tool"]
    refund = files.pairs[3]
    assert [message["role"] for message in refund.prompt] == ["user", "assistant", "tool"]
    assert [tool["function"]["name"] for tool in refund.tools] == ["find_order", "refund_order"]
    assert refund.prompt_task().messages == refund.prompt and files.skipped == []


@pytest.mark.parametrize(("change", "reason"), [
    ({"chosen": []}, "'chosen' must be a list holding one assistant message"),
    ({"rejected": [GOOD["rejected"][0], GOOD["rejected"][0]]}, "'rejected' must be a list holding one assistant"),
    ({"rejected": [{"role": "user", "content": "x"}]}, "'rejected' must be an assistant message, got role 'user'"),
    ({"rejected": GOOD["chosen"]}, "'chosen' and 'rejected' are the same answer"),
    ({"rejected": [{"role": "assistant", "content": " "}]}, "'rejected' is empty"),
    ({"chosen": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": {}}}]}]},
     "'chosen' has a tool call that cannot be read"),
    ({"prompt": []}, "'prompt' must be a non-empty list of messages"),
    ({"prompt": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]},
     "the prompt ends with an assistant message"),
    ({"prompt": [{"role": "robot", "content": "x"}]}, "each message must be an object with a role"),
    ({"tools": {"name": "x"}}, "'tools' must be a list"),
])  # fmt: skip
def test_a_bad_pair_is_skipped_with_its_line_and_reason_or_refused_when_strict(tmp_path, change, reason):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": "bad", **change}) + "\n")
    files = read_pair_files([str(path)], strict=False)
    assert [pair.id for pair in files.pairs] == ["p"]
    assert [(line.line, line.reason) for line in files.skipped] == [(2, files.skipped[0].reason)]
    assert reason in files.skipped[0].reason and files.skipped[0].reason.startswith("pair bad: ")
    with pytest.raises(SpecError, match="pairs.jsonl:2: pair bad: "):
        read_pair_files([str(path)], strict=True)


def test_a_file_without_a_usable_pair_is_refused_with_the_first_reasons(tmp_path):
    # The same call with its arguments as JSON text is the same answer: the pair prefers nothing.
    as_text = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({**GOOD, "rejected": [as_text]}) + "\n{not json\n")
    with pytest.raises(SpecError, match="no usable preference pair in .* \\(2 bad line\\(s\\) skipped: "
                                        "pairs.jsonl:1: pair p: 'chosen' and 'rejected' are the same answer"):
        read_pair_files([str(path)], strict=False)
    with pytest.raises(SpecError, match="preference pair file not found"):
        read_pair_files([str(tmp_path / "missing.jsonl")], strict=False)
