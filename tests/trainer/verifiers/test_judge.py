"""The judge's rubric, prompt and reply parser: no model, only text in and a score and reason out."""

from __future__ import annotations

import pytest

from trainer.contracts import ContractError
from trainer.verifiers.judge import (
    NO_REASON,
    REPLY_PREFIX,
    JudgeItem,
    Rubric,
    cut_middle,
    judge_agreement,
    judge_messages,
    judgement,
    parse_reply,
    transcript,
)

RUBRIC = Rubric(criteria="Right tool, right arguments.", pass_means="The order was looked up.", scale_max=10)
TRAJECTORY = JudgeItem(
    id="t1",
    messages=[
        {"role": "system", "content": "You are the orders bot."},
        {"role": "user", "content": "Where is order 17?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "find_order", "arguments": '{"order": 17}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'},
        {"role": "assistant", "content": "It has shipped."},
    ],
)  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "score", "reason"),
    [
        ("Score: 7\nReason: right tool, wrong date.", 0.7, "right tool, wrong date"),
        ("Score: 10\nReason: all good", 1.0, "all good"),
        ("Score: 0\nReason: cancelled without asking", 0.0, "cancelled without asking"),
        ("Score: 3/5 because the date is wrong", 0.6, "because the date is wrong"),
        ("Score: **8**\n\nReasoning - confirmed first", 0.8, "confirmed first"),
        ("Score: 6", 0.6, NO_REASON),
        ("The agent did well. SCORE = 9. Reason: fine", 0.9, "fine"),
    ],
)
def test_a_readable_reply_gives_its_score_on_the_scale_and_its_reason(reply, score, reason):
    assert parse_reply(reply, RUBRIC) == (score, reason)


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("Score: excellent work", "no score found"),
        ("", "no score found (empty reply)"),
        ("The agent passed.", "no score found"),
        ("Score: 11\nReason: very good", "not on the scale 0-10"),
        ("Score: 12/10", "not on the scale"),
        ("Score: 4/0", "not on the scale"),
    ],
)
def test_an_unreadable_reply_gets_no_score_and_a_reason_that_says_so(reply, why):
    score, reason = parse_reply(reply, RUBRIC)
    assert score is None and reason.startswith("unreadable reply") and why in reason


def test_an_unreadable_reply_is_neither_passed_nor_failed():
    verdict = judgement("t1", "Score: yes", RUBRIC)
    assert (verdict.score, verdict.passed, verdict.raw) == (None, None, "Score: yes")


def test_passing_is_the_score_against_the_rubrics_pass_score():
    strict = Rubric("c", "p", scale_max=4, pass_score=0.75)
    assert [judgement("x", f"Score: {n}", strict).passed for n in range(5)] == [False, False, False, True, True]
    assert judgement("x", "Score: 5\nReason: ok", RUBRIC).to_json() == {
        "id": "x", "score": 0.5, "passed": True, "reason": "ok", "raw": "Score: 5\nReason: ok"}  # fmt: skip


def test_the_prompt_carries_the_rubric_the_format_and_the_trajectory_with_its_calls():
    system, user = judge_messages(RUBRIC, TRAJECTORY)
    assert system["role"] == "system" and user["role"] == "user"
    assert "Right tool, right arguments." in system["content"] and "The order was looked up." in system["content"]
    assert f"{REPLY_PREFIX} <an integer from 0" in system["content"] and "to 10" in system["content"]
    text = user["content"]
    assert "USER: Where is order 17?" in text
    assert 'ASSISTANT CALLS find_order({"order": 17})' in text
    assert 'TOOL RESULT: {"status": "shipped"}' in text and text.endswith("ASSISTANT: It has shipped.")


def test_a_task_and_answer_item_shows_the_answer_to_grade():
    call = {"function": {"name": "cancel", "arguments": {"id": 3}}}
    item = JudgeItem(id="a", messages=[{"role": "user", "content": "Cancel order 3"}],
                     answer={"role": "assistant", "tool_calls": [call]})  # fmt: skip
    system, user = judge_messages(RUBRIC, item)
    assert "a task and the answer" in system["content"]
    assert user["content"].endswith('ANSWER TO GRADE:\nASSISTANT CALLS cancel({"id": 3})')
    assert transcript(JudgeItem(id="b", messages=item.messages, answer="Done.")).endswith("ASSISTANT: Done.")


def test_a_long_trajectory_is_cut_in_the_middle_keeping_its_start_and_end():
    long_item = JudgeItem(id="l", messages=[{"role": "user", "content": "first request"},
                                            *[{"role": "tool", "content": "x" * 500}] * 40,
                                            {"role": "assistant", "content": "final answer"}])  # fmt: skip
    text = transcript(long_item, max_chars=1000)
    assert len(text) <= 1100 and text.startswith("USER: first request") and text.endswith("final answer")
    assert "characters cut" in text
    assert cut_middle("short", 10) == "short"


def test_a_rubric_round_trips_and_refuses_bad_fields():
    assert Rubric.from_json(RUBRIC.to_json()) == RUBRIC
    for bad in ({"criteria": "", "pass_means": "p"}, {"criteria": "c", "pass_means": "p", "scale_max": 0},
                {"criteria": "c", "pass_means": "p", "pass_score": 1.5}, {"criteria": "c"},
                {"criteria": "c", "pass_means": "p", "colour": "red"}):  # fmt: skip
        with pytest.raises(ContractError):
            Rubric.from_json(bad)


def test_a_bad_item_is_refused_with_its_reason():
    with pytest.raises(ContractError, match="'messages'"):
        JudgeItem.from_json({"id": "x", "messages": []})
    with pytest.raises(ContractError, match="'id'"):
        JudgeItem.from_json({"messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(ContractError, match="'answer'"):
        JudgeItem.from_json({"id": "x", "messages": [{"role": "user", "content": "hi"}], "answer": 3})


def test_agreement_counts_an_unreadable_reply_as_a_disagreement_and_kappa_over_scored_items():
    pairs = (
        [(True, True)] * 40 + [(False, False)] * 30 + [(True, False)] * 10 + [(False, True)] * 15 + [(None, True)] * 5
    )
    result = judge_agreement(pairs)
    assert (result.n, result.agreed, result.unreadable) == (100, 70, 5)
    assert (result.pass_pass, result.pass_fail, result.fail_pass, result.fail_fail) == (40, 10, 15, 30)
    assert result.rate.value == 0.7 and round(result.rate.low, 3) == 0.604 and round(result.rate.high, 3) == 0.781
    # observed 70/95, chance (50/95)(55/95) + (45/95)(40/95)
    observed, chance = 70 / 95, (50 / 95) * (55 / 95) + (45 / 95) * (40 / 95)
    assert result.kappa == pytest.approx((observed - chance) / (1 - chance))


def test_a_judge_that_always_says_pass_has_no_agreement_beyond_chance():
    result = judge_agreement([(True, True)] * 50 + [(True, False)] * 50)
    assert result.rate.value == 0.5 and result.kappa == 0.0
    assert judge_agreement([(True, True)] * 3).kappa is None and judge_agreement([]).rate is None
