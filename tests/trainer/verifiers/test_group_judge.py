"""Group-relative judging's prompt and reply parser: the G answers to one task in one chat, one score each out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.contracts import ContractError
from trainer.verifiers.group_judge import (
    GROUP_REPLY_PREFIX,
    JudgeGroup,
    group_judge_messages,
    group_judgements,
    group_transcript,
    parse_group_reply,
    score_spread,
)
from trainer.verifiers.judge import NO_REASON, Rubric

RUBRIC = Rubric(criteria="Right tool, right arguments.", pass_means="The order was looked up.", scale_max=10)
CONVERSATION = [
    {"role": "system", "content": "You are the orders bot."},
    {"role": "user", "content": "Where is order 17?"},
]
CALL = {"role": "assistant", "content": None,
        "tool_calls": [{"function": {"name": "find_order", "arguments": {"order": 17}}}]}  # fmt: skip
GROUP = JudgeGroup(id="g", messages=CONVERSATION, answers=[CALL, "No idea, sorry.", "Let me check order 71."])


def scores(reply: str, count: int = 3) -> list[float | None]:
    return [score for score, _ in parse_group_reply(reply, RUBRIC, count)]


def test_the_prompt_shows_the_conversation_once_and_each_candidate_once_labelled():
    system, user = group_judge_messages(RUBRIC, GROUP)
    assert (system["role"], user["role"]) == ("system", "user")
    text = user["content"]
    assert text.count("Where is order 17?") == 1 and text.count("You are the orders bot.") == 1
    for number, answer in enumerate(['ASSISTANT CALLS find_order({"order": 17})', "ASSISTANT: No idea, sorry.",
                                     "ASSISTANT: Let me check order 71."], start=1):  # fmt: skip
        assert text.count(f"CANDIDATE {number}:\n{answer}") == 1 and text.count(answer) == 1
    assert "CANDIDATE 4" not in text
    assert text.index("Where is order 17?") < text.index("CANDIDATE 1:") < text.index("CANDIDATE 3:")


def test_the_system_turn_asks_for_one_score_line_per_candidate_relative_to_the_others():
    system = group_judge_messages(RUBRIC, GROUP)[0]["content"]
    assert "Right tool, right arguments." in system and "The order was looked up." in system
    assert "comparing the candidates with each other" in system
    for number in (1, 2, 3):
        assert system.count(f"Candidate {number}: <an integer from 0 to 10>") == 1
    assert "Candidate 4" not in system and "Reason:" in system
    assert GROUP_REPLY_PREFIX == "Candidate 1:"


def test_long_answers_share_half_the_transcript_and_the_conversation_keeps_its_start_and_end():
    long = JudgeGroup(id="l", messages=[{"role": "user", "content": "first request " + "x" * 5000 + " last words"}],
                      answers=["a" * 3000 + " end one", "b" * 3000 + " end two"])  # fmt: skip
    text = group_transcript(long, max_chars=2000)
    assert len(text) <= 2300 and "characters cut" in text
    assert text.startswith("USER: first request") and "last words" in text
    assert "end one" in text and text.endswith("end two")


def test_a_group_of_one_answer_is_refused():
    with pytest.raises(ContractError, match="at least 2 answers"):
        JudgeGroup(id="one", messages=CONVERSATION, answers=["only"])


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Candidate 1: 9\nCandidate 2: 2\nCandidate 3: 5\nReason: 1 looked it up", [0.9, 0.2, 0.5]),
        # Labels, not positions, say whose score it is.
        ("Candidate 1: 9\nCandidate 3: 5\nCandidate 2: 2", [0.9, 0.2, 0.5]),
        ("Candidate 1: **8/10**\n**Candidate 2**: 4\n- candidate #3 = 0", [0.8, 0.4, 0.0]),
        ("Candidate 1: 3/5\nCandidate 2: 10\nCandidate 3: 7 (close)", [0.6, 1.0, 0.7]),
        # The judge started its lines again below the reply prefix: the bare prefix is no reading.
        (GROUP_REPLY_PREFIX + "\nCandidate 1: 4\nCandidate 2: 6\nCandidate 3: 8", [0.4, 0.6, 0.8]),
    ],
)
def test_labelled_lines_give_each_candidate_its_own_score(reply, expected):
    assert scores(reply) == expected


def test_a_missing_candidate_gets_no_score_and_a_reason_that_names_it():
    read = parse_group_reply("Candidate 1: 7\nCandidate 3: 2\nReason: 2 said nothing", RUBRIC, 3)
    assert [score for score, _ in read] == [0.7, None, 0.2]
    assert read[0][1] == read[2][1] == "2 said nothing"
    assert read[1][1].startswith("unreadable reply: no score line for candidate 2")


@pytest.mark.parametrize("reply", ["", "Candidate 1: excellent, the best", "I think they are all fine.",
                                   "Score: 7\nReason: fine", "Candidate 1 is better than Candidate 2."])  # fmt: skip
def test_garbage_gives_no_candidate_a_score(reply):
    read = parse_group_reply(reply, RUBRIC, 3)
    assert all(score is None and reason.startswith("unreadable reply") for score, reason in read)


def test_a_score_off_the_scale_or_a_label_out_of_range_scores_nobody():
    assert scores("Candidate 1: 11\nCandidate 2: 12/10\nCandidate 3: 4/0") == [None, None, None]
    # A candidate that does not exist is ignored: it takes no other candidate's place.
    assert scores("Candidate 0: 9\nCandidate 1: 6\nCandidate 4: 9\nCandidate 2: 3\nCandidate 3: 1") == [0.6, 0.3, 0.1]
    assert scores("Candidate 4: 9\nCandidate 5: 8\nCandidate 6: 7") == [None, None, None]


def test_a_candidate_scored_twice_differently_gets_no_score_and_alike_keeps_it():
    read = parse_group_reply("Candidate 1: 7\nCandidate 2: 3\nCandidate 2: 8\nCandidate 1: 7", RUBRIC, 2)
    assert read[0][0] == 0.7
    assert read[1][0] is None and "scored more than once, differently (0.3, 0.8)" in read[1][1]
    # A line with a label and no number beside a readable one makes the candidate unreadable too.
    assert scores("Candidate 1: 7\nCandidate 1: great\nCandidate 2: 3", 2) == [None, 0.3]


def test_only_the_lines_before_the_reason_are_scores():
    reply = "Candidate 1: 6\nCandidate 2: 4\nReason: 2 is short,\nCandidate 2: 9 would be too much"
    why = "2 is short, Candidate 2: 9 would be too much"
    assert parse_group_reply(reply, RUBRIC, 2) == [(0.6, why), (0.4, why)]
    assert parse_group_reply("Candidate 1: 6\nCandidate 2: 4", RUBRIC, 2)[0][1] == NO_REASON


def test_judgements_follow_the_answers_order_with_the_whole_reply_kept():
    reply = "Candidate 1: 9\nCandidate 3: 5\nReason: 2 is silent"
    verdicts = group_judgements(GROUP, reply, RUBRIC)
    assert [(v.id, v.score, v.passed) for v in verdicts] == [("g:1", 0.9, True), ("g:2", None, None),
                                                              ("g:3", 0.5, True)]  # fmt: skip
    assert all(v.raw == reply for v in verdicts)


def test_the_spread_is_over_the_readable_scores_only():
    assert score_spread([0.9, None, 0.3]) == 0.6
    assert score_spread([0.5, 0.5]) == 0.0
    assert score_spread([None, 0.7]) == 0.0 and score_spread([None, None]) == 0.0


# --- properties ---------------------------------------------------------------------------------------

values = st.one_of(st.integers(-5, 15).map(str), st.text(max_size=6))
separators = st.sampled_from([":", "=", " -", "", " is"])
lines = st.one_of(
    st.text(max_size=40),
    st.builds(lambda label, sep, value: f"Candidate {label}{sep} {value}", st.integers(-2, 12), separators, values),
    st.just("Reason: because"),
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(lines, max_size=12).map("\n".join), st.integers(2, 8))
def test_any_reply_gives_one_score_or_none_per_candidate_never_off_the_scale(reply, count):
    read = parse_group_reply(reply, RUBRIC, count)
    assert len(read) == count
    for score, reason in read:
        assert (score is None and reason.startswith("unreadable reply")) or (0.0 <= score <= 1.0 and reason)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.integers(0, 10), min_size=2, max_size=8).flatmap(lambda values: st.tuples(
    st.just(values), st.permutations(range(1, len(values) + 1)))))  # fmt: skip
def test_a_well_formed_reply_in_any_order_reads_back_exactly(case):
    values, order = case
    reply = "\n".join(f"Candidate {label}: {values[label - 1]}" for label in order) + "\nReason: compared"
    assert scores(reply, len(values)) == [value / 10 for value in values]
