from __future__ import annotations

import pytest

from flywheel.ingest.parsers import FieldMapping, RecordError, parse_record

NATIVE = {
    "id": "conv-1",
    "agent": "support-bot",
    "model_version": "support-bot:v3",
    "outcome": "failure",
    "started_at": "2026-05-01T14:30:00Z",
    "duration_ms": 8123,
    "tokens": {"input": 1830, "output": 212},
    "cost": 0.0041,
    "metadata": {"tier": "gold"},
    "steps": [
        {"kind": "user", "text": "Cancel order 1234"},
        {"kind": "tool_call", "tool": "cancel_order", "arguments": {"order_id": "1234"}, "call_id": "c1"},
        {"kind": "tool_result", "tool": "cancel_order", "call_id": "c1", "text": "shipped", "error": True},
        {"kind": "human_intervention", "text": "offer a return label"},
    ],
}


def test_native_records_keep_every_part():
    parsed = parse_record(NATIVE, "native", FieldMapping())
    assert (parsed.external_id, parsed.agent, parsed.model_version, parsed.outcome) == (
        "conv-1",
        "support-bot",
        "support-bot:v3",
        "failure",
    )
    assert (parsed.input_tokens, parsed.output_tokens, parsed.cost, parsed.duration_ms) == (1830, 212, 0.0041, 8123)
    assert [step.kind for step in parsed.steps] == ["user", "tool_call", "tool_result", "human_intervention"]
    assert parsed.steps[1].tool_arguments == {"order_id": "1234"} and parsed.steps[2].is_error


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"steps": []}, "non-empty 'steps' list"),
        ({"steps": [{"kind": "thinking"}]}, "step 0 has kind 'thinking'"),
        ({"steps": [{"kind": "tool_call"}]}, "tool_call without 'tool'"),
        ({"outcome": "meh"}, "outcome 'meh' is not success"),
        ({"started_at": "yesterday"}, "ISO 8601"),
        ({"tokens": [1, 2]}, "tokens of the record must be an object"),
        ({"cost": "cheap"}, "cost must be a number"),
    ],
)
def test_native_records_with_bad_fields_are_refused_with_the_reason(change, reason):
    with pytest.raises(RecordError, match=reason):
        parse_record({**NATIVE, **change}, "native", FieldMapping())


CHAT = {
    "task_id": 3,
    "trial": 1,
    "reward": 0.0,
    "info": {"task": {"actions": [{"name": "cancel", "kwargs": {}}]}},
    "traj": [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": [{"type": "text", "text": "cancel it"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": '{"id": "1"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "cancel", "arguments": '{"id": '}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "open"}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: bad arguments"},
        {"role": "assistant", "content": "Done."},
    ],
}
TAU = FieldMapping.from_pairs({"messages": "traj", "outcome": "reward", "id": "task_id,trial"})


def test_openai_chat_records_become_steps_with_calls_and_results():
    parsed = parse_record(CHAT, "openai-chat", TAU)
    assert [step.kind for step in parsed.steps] == [
        "system",
        "user",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    assert parsed.steps[2].tool_arguments == {"id": "1"}
    assert parsed.steps[3].tool_arguments is None and parsed.steps[3].tool_arguments_raw == '{"id": '
    assert parsed.steps[4].tool_name == "get_order" and not parsed.steps[4].is_error
    assert parsed.steps[5].tool_name == "cancel" and parsed.steps[5].is_error
    assert (parsed.external_id, parsed.outcome, parsed.final_result) == ("3:1", "failure", "Done.")
    assert parsed.metadata["info"]["task"]["actions"][0]["name"] == "cancel"


def test_an_openai_chat_record_carries_its_cost_where_it_has_one():
    record = {"messages": [{"role": "user", "content": "hi"}], "usage": {"prompt_tokens": 10, "completion_tokens": 2}}
    assert parse_record(record, "openai-chat", FieldMapping()).cost is None
    assert parse_record({**record, "cost": 0.0021}, "openai-chat", FieldMapping()).cost == 0.0021
    with pytest.raises(RecordError, match="cost must be a number"):
        parse_record({**record, "cost": "$0.002"}, "openai-chat", FieldMapping())


@pytest.mark.parametrize(("reward", "outcome"), [(1.0, "success"), (0.5, "success"), (0, "failure"), (-1, "failure")])
def test_a_numeric_outcome_above_zero_is_a_success(reward, outcome):
    assert parse_record({**CHAT, "reward": reward}, "openai-chat", TAU).outcome == outcome


def test_auto_detection_picks_the_format_from_the_record():
    assert parse_record(NATIVE, "auto", FieldMapping()).external_id == "conv-1"
    assert parse_record(CHAT, "auto", TAU).external_id == "3:1"
    with pytest.raises(RecordError, match="cannot tell the format"):
        parse_record({"hello": "world"}, "auto", FieldMapping())


def test_an_unknown_mapping_key_is_refused():
    with pytest.raises(ValueError, match="unknown mapping key colour"):
        FieldMapping.from_pairs({"colour": "x"})


def test_an_unknown_role_is_refused():
    with pytest.raises(RecordError, match="role 'robot'"):
        parse_record({"messages": [{"role": "robot", "content": "x"}]}, "openai-chat", FieldMapping())
