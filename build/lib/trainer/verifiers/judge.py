"""The LLM judge's face without a model: the rubric, the judge's prompt, and the reading of its reply.

A judge is a local model asked to score one item against an agent's rubric. An item is either a
whole trajectory (its messages, with the agent's tool calls and the tools' results) or a task and
an answer (the task's messages and the answer given to them, `answer`). `judge_messages` builds
the chat the judge sees: a system turn with the rubric and the reply format, a user turn with
the item as a plain transcript (long items are cut in the middle, so the request and the ending
both stay). `parse_reply` reads the reply into a score in [0, 1] and a written reason; a reply
with no readable score gets no score (None) and a reason that says so, never a silent 0 or 1.

Generating the reply is `trainer.judge`'s job (it loads the model); nothing here imports torch,
so the app builds rubrics and reads judgements with it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.contracts import ContractError
from trainer.spec.stats import Interval, wilson_interval

# The judge's reply starts with this text, written into the prompt after the generation prompt:
# even a small model then answers with the number first, in the format the parser reads.
REPLY_PREFIX = "Score:"
DEFAULT_MAX_TRANSCRIPT_CHARS = 6000
DEFAULT_MAX_MESSAGE_CHARS = 600
NO_REASON = "the judge gave no reason"


@dataclass(frozen=True)
class Rubric:
    """What the judge checks (`criteria`), what a passing item is (`pass_means`), and the score scale.

    The judge answers an integer from 0 to `scale_max`; the score is that over `scale_max`, and an
    item passes when its score is at least `pass_score`.
    """

    criteria: str
    pass_means: str
    scale_max: int = 10
    pass_score: float = 0.5

    def __post_init__(self) -> None:
        if not self.criteria.strip() or not self.pass_means.strip():
            raise ContractError("a rubric needs its criteria and what passing means")
        if not 1 <= self.scale_max <= 100:
            raise ContractError(f"a rubric's scale_max must be from 1 to 100, got {self.scale_max}")
        if not 0.0 < self.pass_score <= 1.0:
            raise ContractError(f"a rubric's pass_score must be in (0, 1], got {self.pass_score}")

    def passed(self, score: float | None) -> bool | None:
        return None if score is None else score >= self.pass_score

    def to_json(self) -> dict[str, Any]:
        return {"criteria": self.criteria, "pass_means": self.pass_means, "scale_max": self.scale_max,
                "pass_score": self.pass_score}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rubric:
        unknown = sorted(set(data) - {"criteria", "pass_means", "scale_max", "pass_score"})
        if unknown:
            raise ContractError(f"unknown rubric field(s): {', '.join(unknown)}")
        criteria, pass_means = data.get("criteria"), data.get("pass_means")
        scale_max, pass_score = data.get("scale_max", 10), data.get("pass_score", 0.5)
        if not isinstance(criteria, str) or not isinstance(pass_means, str):
            raise ContractError("a rubric's criteria and pass_means must be text")
        if type(scale_max) is not int or type(pass_score) not in (int, float):
            raise ContractError("a rubric's scale_max must be an integer and pass_score a number")
        return cls(criteria=criteria, pass_means=pass_means, scale_max=scale_max, pass_score=float(pass_score))


DEFAULT_RUBRIC = Rubric(
    criteria=(
        "Did the agent do what the user asked, following its instructions and policy? Check each tool call: the "
        "right tool, the right arguments, taken only after the user confirmed where the policy requires it; "
        "and check that the agent's final answer is true to what the tools returned."
    ),
    pass_means="The user's request was fully and correctly handled, with no action the policy forbids.",
)


@dataclass(frozen=True)
class JudgeItem:
    """One thing to judge: a trajectory (`messages`), or a task's `messages` and the `answer` given to it.

    `answer` is the answer's text or an OpenAI assistant message (with `tool_calls`); None for a trajectory.
    """

    id: str
    messages: list[dict[str, Any]]
    answer: str | dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "messages": self.messages, "answer": self.answer}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JudgeItem:
        item_id, messages, answer = data.get("id"), data.get("messages"), data.get("answer")
        if not isinstance(item_id, str) or not item_id:
            raise ContractError("a judge item's 'id' must be a non-empty string")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ContractError(f"judge item {item_id!r}: 'messages' must be a non-empty list of messages")
        if answer is not None and not isinstance(answer, str | dict):
            raise ContractError(f"judge item {item_id!r}: 'answer' must be null, a text or an assistant message")
        return cls(id=item_id, messages=messages, answer=answer)


def judge_messages(
    rubric: Rubric, item: JudgeItem, max_chars: int = DEFAULT_MAX_TRANSCRIPT_CHARS
) -> list[dict[str, str]]:
    """The chat the judge model answers: the rubric and reply format, then the item as a transcript."""
    what = "a task and the answer an AI agent gave to it" if item.answer is not None else "an AI agent's conversation"
    system = (
        f"You are a strict reviewer. You will read {what} and grade it.\n\n{rubric_text(rubric)}\n\n"
        f"Reply in exactly this format:\n{REPLY_PREFIX} <an integer from 0 (fails completely) to {rubric.scale_max} "
        f"(passes completely)>\nReason: <one or two sentences>"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": transcript(item, max_chars)}]


def transcript(item: JudgeItem, max_chars: int = DEFAULT_MAX_TRANSCRIPT_CHARS) -> str:
    """The item as plain text turns; each turn and the whole cut to fit, keeping the start and the end."""
    turns = [_turn(message) for message in item.messages]
    if item.answer is not None:
        turns.append("ANSWER TO GRADE:\n" + answer_text(item.answer))
    return cut_middle("\n\n".join(turn for turn in turns if turn), max_chars)


def rubric_text(rubric: Rubric) -> str:
    """The rubric as the judge's system turn states it: the criteria and what a passing item is."""
    return f"Criteria: {rubric.criteria.strip()}\nA passing item: {rubric.pass_means.strip()}"


def answer_text(answer: str | dict[str, Any]) -> str:
    """An answer (a text or an assistant message) as a transcript turn: its text, then its calls."""
    return _turn(answer if isinstance(answer, dict) else {"role": "assistant", "content": answer})


def _turn(message: Mapping[str, Any]) -> str:
    role = str(message.get("role", "?")).upper()
    text = cut_middle(_content(message.get("content")), DEFAULT_MAX_MESSAGE_CHARS)
    calls = [_call_text(call) for call in message.get("tool_calls") or [] if isinstance(call, Mapping)]
    lines = [f"{'TOOL RESULT' if role == 'TOOL' else role}: {text}"] if text else []
    lines.extend(f"{role} CALLS {call}" for call in calls)
    return "\n".join(lines)


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping)).strip()
    return ""


def _call_text(call: Mapping[str, Any]) -> str:
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return cut_middle(f"{function.get('name', '?')}({arguments})", DEFAULT_MAX_MESSAGE_CHARS)


def cut_middle(text: str, max_chars: int) -> str:
    """`text`, or its start and end around a marker saying how much was cut, in at most about `max_chars`."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars // 2 - 20, 1)
    return f"{text[:keep]} [... {len(text) - 2 * keep} characters cut ...] {text[-keep:]}"


@dataclass(frozen=True)
class Judgement:
    """The judge's verdict on one item: score in [0, 1] (None: unreadable reply), passed, reason, raw reply."""

    id: str
    score: float | None
    passed: bool | None
    reason: str
    raw: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "score": self.score, "passed": self.passed, "reason": self.reason, "raw": self.raw}


_SCORE = re.compile(
    r"score\s*[:=]?\s*\**\s*(?P<value>\d+(?:\.\d+)?)\s*(?:/\s*(?P<out_of>\d+(?:\.\d+)?))?", re.IGNORECASE
)
_REASON = re.compile(r"reason(?:ing)?\s*[:\-]\s*(?P<reason>.+)", re.IGNORECASE | re.DOTALL)


def parse_reply(reply: str, rubric: Rubric) -> tuple[float | None, str]:
    """The score in [0, 1] and the reason in a judge's reply (with `REPLY_PREFIX` in front).

    The score is the first number after "Score" (a fraction "7/10" is read as such), on the
    rubric's scale; a reply without one, or with a number off the scale, has no score, and its
    reason says why. The reason is the text after "Reason:", else what follows the score.

    >>> parse_reply("Score: 7\\nReason: right tool, wrong date", Rubric("c", "p"))
    (0.7, 'right tool, wrong date')
    """
    match = _SCORE.search(reply)
    if match is None:
        return None, f"unreadable reply: no score found ({reply_excerpt(reply)})"
    score = scaled_score(match["value"], match["out_of"], rubric)
    if score is None:
        return None, f"unreadable reply: score {match.group(0).strip()!r} is not on the scale 0-{rubric.scale_max}"
    return score, reply_reason(reply, match.end())


def scaled_score(value: str, out_of: str | None, rubric: Rubric) -> float | None:
    """A written score (`value`, over `out_of` where the judge wrote a fraction) in [0, 1]; None off the scale."""
    number, scale = float(value), float(out_of) if out_of else float(rubric.scale_max)
    if scale <= 0 or not 0.0 <= number <= scale:
        return None
    return round(number / scale, 4)


def reply_reason(reply: str, score_end: int) -> str:
    """The reason in a reply: the text after "Reason:" past `score_end`, else all that follows the score."""
    labelled = _REASON.search(reply, score_end)
    text = labelled["reason"] if labelled else reply[score_end:]
    text = " ".join(text.split()).strip(" .:-*")
    return text or NO_REASON


def reply_excerpt(reply: str) -> str:
    """A short quote of a reply (for the reason an unreadable one gets)."""
    text = " ".join(reply.split())
    return repr(cut_middle(text, 120)) if text else "empty reply"


def judgement(item_id: str, reply: str, rubric: Rubric) -> Judgement:
    """The judgement of one item from the judge's raw reply."""
    score, reason = parse_reply(reply, rubric)
    return Judgement(id=item_id, score=score, passed=rubric.passed(score), reason=reason, raw=reply)


@dataclass(frozen=True)
class JudgeAgreement:
    """How often a judge's pass/fail matches reference labels (reviewers', or a benchmark's outcome).

    `rate` counts every labelled item, an unreadable reply as a disagreement: a judge that cannot
    answer must not look better for it. `kappa` (Cohen's) is over the items the judge scored;
    None where it is undefined (both sides gave one answer only). Confusion counts read
    judge/label: `pass_pass` is judged passing and labelled passing.
    """

    n: int
    agreed: int
    unreadable: int
    rate: Interval | None
    kappa: float | None
    pass_pass: int
    pass_fail: int
    fail_pass: int
    fail_fail: int

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "agreed": self.agreed, "unreadable": self.unreadable,
                "rate": self.rate.to_json() if self.rate else None,
                "kappa": None if self.kappa is None else round(self.kappa, 4),
                "confusion": {"pass_pass": self.pass_pass, "pass_fail": self.pass_fail, "fail_pass": self.fail_pass,
                              "fail_fail": self.fail_fail}}  # fmt: skip


def judge_agreement(pairs: Sequence[tuple[bool | None, bool]]) -> JudgeAgreement:
    """The agreement of (judge passed, label passed) pairs; judge None is an unreadable reply.

    >>> judge_agreement([(True, True), (False, True), (None, False)]).agreed
    1
    """
    counts = Counter((judged, label) for judged, label in pairs if judged is not None)
    agreed = counts[True, True] + counts[False, False]
    scored = sum(counts.values())
    return JudgeAgreement(
        n=len(pairs), agreed=agreed, unreadable=len(pairs) - scored,
        rate=wilson_interval(agreed, len(pairs)) if pairs else None, kappa=cohens_kappa(counts),
        pass_pass=counts[True, True], pass_fail=counts[True, False], fail_pass=counts[False, True],
        fail_fail=counts[False, False],
    )  # fmt: skip


def cohens_kappa(counts: Mapping[tuple[bool, bool], int]) -> float | None:
    """Cohen's kappa of a 2x2 table keyed (judge, label): agreement beyond what the two rates give by chance."""
    n = sum(counts.values())
    if n == 0:
        return None
    observed = (counts.get((True, True), 0) + counts.get((False, False), 0)) / n
    judge_yes = (counts.get((True, True), 0) + counts.get((True, False), 0)) / n
    label_yes = (counts.get((True, True), 0) + counts.get((False, True), 0)) / n
    chance = judge_yes * label_yes + (1 - judge_yes) * (1 - label_yes)
    return None if chance >= 1.0 else (observed - chance) / (1 - chance)
