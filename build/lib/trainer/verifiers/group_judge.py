"""Group-relative judging (as OpenPipe's RULER does): the answers to one task scored together, each against the others.

A group is one task's conversation and the G answers a policy gave to it. `group_judge_messages`
builds ONE judge chat for it: the rubric and the reply format (a line `Candidate N: <score>` per
candidate, then a reason) in the system turn, and in the user turn the conversation once followed
by each answer once, labelled Candidate 1..G. The judge is asked to score every candidate on the
rubric's scale relative to the others. `parse_group_reply` reads one score in [0, 1] per candidate:
a candidate whose line is missing, has no number, is off the scale or is given two different
scores gets no score (None) and a reason that says so, never a silent 0 or 1; lines naming a
candidate that does not exist are ignored.

The rubric, transcript and cutting helpers are the single-answer judge's (`trainer.verifiers.judge`).
Generating the reply is `trainer.judge.judge_groups`'s job. Not covered: whether group scores agree
with reviewers (the app measures the single-answer judge only), or position bias within the group.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainer.contracts import ContractError
from trainer.verifiers.judge import (
    DEFAULT_MAX_TRANSCRIPT_CHARS,
    NO_REASON,
    JudgeItem,
    Judgement,
    Rubric,
    answer_text,
    cut_middle,
    reply_excerpt,
    reply_reason,
    rubric_text,
    scaled_score,
    transcript,
)

# The judge's reply starts with the first candidate's label, so even a small model answers in the format read here.
GROUP_REPLY_PREFIX = "Candidate 1:"
# The reply tokens each candidate needs: its line ("Candidate 12: 7/10" and a line break is about 10 tokens) and a
# share of the reason. GrpoConfig refuses a judge_max_new_tokens below this times the group size.
MIN_TOKENS_PER_CANDIDATE = 16


@dataclass(frozen=True)
class JudgeGroup:
    """One task's conversation (`messages`) and the answers given to it, judged together.

    Each answer is a text or an OpenAI assistant message (with `tool_calls`).
    """

    id: str
    messages: list[dict[str, Any]]
    answers: list[str | dict[str, Any]]

    def __post_init__(self) -> None:
        if len(self.answers) < 2:
            raise ContractError(f"judge group {self.id!r}: group judging compares at least 2 answers")


def group_judge_messages(
    rubric: Rubric, group: JudgeGroup, max_chars: int = DEFAULT_MAX_TRANSCRIPT_CHARS
) -> list[dict[str, str]]:
    """The chat the judge answers for a group: the rubric and one score line per candidate, then the group."""
    count, scale = len(group.answers), rubric.scale_max
    lines = "\n".join(f"Candidate {number}: <an integer from 0 to {scale}>" for number in range(1, count + 1))
    system = (
        f"You are a strict reviewer. You will read a task and {count} candidate answers that AI agents gave to it, "
        f"and grade each candidate from 0 (fails completely) to {scale} (passes completely), comparing the "
        "candidates with each other: a better answer gets a higher score, equally good answers get the same "
        f"score, and a score still says how well the answer meets the criteria.\n\n{rubric_text(rubric)}\n\n"
        f"Reply in exactly this format, one line per candidate:\n{lines}\n"
        "Reason: <one or two sentences comparing the candidates>"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": group_transcript(group, max_chars)}]


def group_transcript(group: JudgeGroup, max_chars: int = DEFAULT_MAX_TRANSCRIPT_CHARS) -> str:
    """The conversation once, then each answer labelled; the conversation and the answers get half of
    `max_chars` each, every answer an equal share (cut in the middle, keeping its start and end)."""
    conversation = transcript(JudgeItem(id=group.id, messages=group.messages), max(max_chars // 2, 1))
    share = max(max_chars // (2 * len(group.answers)), 1)
    candidates = [f"CANDIDATE {number}:\n{cut_middle(answer_text(answer), share)}"
                  for number, answer in enumerate(group.answers, start=1)]  # fmt: skip
    return "\n\n".join([conversation, f"{len(group.answers)} CANDIDATE ANSWERS TO GRADE:", *candidates])


_CANDIDATE_LINE = re.compile(
    r"^[\s*#>-]*candidate\s*#?\s*(?P<label>\d+)\s*\**\s*[:=\-](?P<rest>.*)$", re.IGNORECASE | re.MULTILINE
)
_VALUE = re.compile(r"^\s*\**\s*(?P<value>\d+(?:\.\d+)?)\s*(?:/\s*(?P<out_of>\d+(?:\.\d+)?))?")
_REASON_START = re.compile(r"^[\s*#>-]*reason(?:ing)?\s*[:\-]", re.IGNORECASE | re.MULTILINE)


def parse_group_reply(reply: str, rubric: Rubric, count: int) -> list[tuple[float | None, str]]:
    """Each candidate's score in [0, 1] and reason in a group judge's reply (with `GROUP_REPLY_PREFIX` in front).

    Only the lines before "Reason:" that start with a label and a colon ("Candidate 2: 7", "7/10"
    read as a fraction) are read as scores; prose such as "Candidate 2 is better" is not. A
    candidate scored once, or several times alike, gets that score and the reply's reason; one with
    no line, a line without a number on the scale, or two different scores gets None and a reason
    that says why. Lines naming a candidate outside 1..`count`, and bare labels, are ignored.

    >>> parse_group_reply("Candidate 1: 8\\nCandidate 2: 3\\nReason: 2 used the wrong tool", Rubric("c", "p"), 2)
    [(0.8, '2 used the wrong tool'), (0.3, '2 used the wrong tool')]
    """
    reason_start = _REASON_START.search(reply)
    scores_part = reply[: reason_start.start()] if reason_start else reply
    readings: dict[int, list[float | None]] = {number: [] for number in range(1, count + 1)}
    last_line_end = 0
    for line in _CANDIDATE_LINE.finditer(scores_part):
        label = int(line["label"])
        # A candidate that does not exist scores nothing; a bare label (the reply prefix, when the judge starts
        # its lines again below it) is no reading.
        if label in readings and line["rest"].strip(" *"):
            value = _VALUE.match(line["rest"])
            readings[label].append(scaled_score(value["value"], value["out_of"], rubric) if value else None)
            last_line_end = line.end()
    reason = reply_reason(reply, last_line_end) if last_line_end else NO_REASON
    return [_candidate(number, found, reason, reply, rubric) for number, found in readings.items()]


def _candidate(number: int, readings: list[float | None], reason: str, reply: str,
               rubric: Rubric) -> tuple[float | None, str]:  # fmt: skip
    if not readings:
        return None, f"unreadable reply: no score line for candidate {number} ({reply_excerpt(reply)})"
    if None in readings:
        return None, f"unreadable reply: candidate {number}'s line has no score on the scale 0-{rubric.scale_max}"
    if len(set(readings)) > 1:
        scores = ", ".join(f"{score:g}" for score in readings if score is not None)
        return None, f"unreadable reply: candidate {number} was scored more than once, differently ({scores})"
    return readings[0], reason


def group_judgements(group: JudgeGroup, reply: str, rubric: Rubric) -> list[Judgement]:
    """One judgement per answer of `group` from the judge's raw reply, in the answers' order (ids `<group>:<N>`)."""
    read = parse_group_reply(reply, rubric, len(group.answers))
    return [Judgement(id=f"{group.id}:{number}", score=score, passed=rubric.passed(score), reason=reason, raw=reply)
            for number, (score, reason) in enumerate(read, start=1)]  # fmt: skip


def score_spread(scores: Sequence[float | None]) -> float:
    """How far apart a group's readable scores are (highest minus lowest); 0 with fewer than two.

    >>> score_spread([0.9, None, 0.3])
    0.6
    """
    readable = [score for score in scores if score is not None]
    return round(max(readable) - min(readable), 4) if len(readable) > 1 else 0.0
