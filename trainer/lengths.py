"""Token lengths of a task set against a run's limits, measured before any step.

A limit that cuts a reference answer cuts the answer a correct model would give: GRPO scores
the cut call as unreadable and learns to prefer short wrong ones, and TRL's SFT trains on a cut
answer (or silently drops an example left with no completion token). So each limit is checked
against the tokenized reference answers of the train tasks: the run reports how many it cuts (a
`length/...` metric and a log line) and refuses to start when more than `max_truncated_share`
of them would be cut, naming the length needed. A limit left null is derived from the same
lengths: the 99th percentile plus a margin, rounded up to a multiple of 8.

Episode SFT (`max_turns` above 1) checks `max_length` the same way against the rendered reference
episodes (`trainer.demonstrations`): each whole episode's tokens, and the tokens before its first
answer (TRL drops an example whose answers the limit cuts away entirely).

DPO (`trainer.dpo`) checks `max_length` against each prompt with its chosen and with its rejected
answer, and derives the held-out answer limit from the chosen answers.

Held-out tasks are only counted, never used to derive a limit (nothing is tuned on them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.contracts import LogEvent, MetricEvent, Task
from trainer.jobs import EventStream
from trainer.prompts import format_tool_calls, reference_calls, render_prompt
from trainer.spec.config import SpecError
from trainer.spec.stats import percentile

MARGIN_TOKENS = 16


@dataclass(frozen=True)
class Lengths:
    """Token counts of one kind of text over a task set (`what` names it in messages)."""

    what: str
    counts: list[int]
    source: str = "the train tasks"  # what a derived limit is said to be derived from

    def cut_by(self, limit: int) -> int:
        return sum(1 for count in self.counts if count > limit)

    def derived_limit(self) -> int:
        """The 99th percentile plus a margin, rounded up to a multiple of 8."""
        return int(math.ceil((percentile([float(c) for c in self.counts], 99) + MARGIN_TOKENS) / 8) * 8)


def answer_tokens(tasks: Sequence[Task], tokenizer: Any, episodes: bool = False) -> Lengths:
    """Tokens of each reference answer (as the prompt's output format writes it) plus the end-of-turn token.

    For `episodes` each reference call is an answer of its own: an episode makes one call a turn.
    """
    if episodes:
        return Lengths("reference calls", [_count(tokenizer, format_tool_calls([call])) + 1
                                           for task in _with_answers(tasks) for call in reference_calls(task)])
    return Lengths("reference answers", [_count(tokenizer, _answer(task)) + 1 for task in _with_answers(tasks)])


def example_tokens(tasks: Sequence[Task], tokenizer: Any) -> Lengths:
    """Tokens of each prompt plus its reference answer: what an SFT example holds."""
    return Lengths("prompts with their answers", [
        _count(tokenizer, render_prompt(task, tokenizer)) + _count(tokenizer, _answer(task)) + 1
        for task in _with_answers(tasks)
    ])  # fmt: skip


def prompt_tokens(tasks: Sequence[Task], tokenizer: Any) -> Lengths:
    """Tokens of each prompt of a task with a reference answer: what an SFT example holds before its answer."""
    return Lengths("prompts", [_count(tokenizer, render_prompt(task, tokenizer)) for task in _with_answers(tasks)])


def longest_prompt(tasks: Sequence[Task], tokenizer: Any) -> int:
    """Tokens of the longest prompt among all `tasks` (GRPO samples answers to every one)."""
    return max((_count(tokenizer, render_prompt(task, tokenizer)) for task in tasks), default=0)


def episode_tokens(examples: Sequence[Mapping[str, Sequence[int]]]) -> Lengths:
    """Tokens of each pre-tokenized reference episode: what an episode SFT example holds."""
    return Lengths("reference episodes", [len(example["input_ids"]) for example in examples])


def first_answer_tokens(examples: Sequence[Mapping[str, Sequence[int]]]) -> Lengths:
    """Tokens of each reference episode before its first answer token (every token when it has none)."""
    return Lengths("prompts before the first answer", [
        list(example["assistant_masks"]).index(1) if 1 in example["assistant_masks"] else len(example["input_ids"])
        for example in examples
    ])  # fmt: skip


def refuse_empty_examples(prompts: Lengths, *, limit: int, events: EventStream) -> None:
    """Report the examples whose prompt alone fills `limit`; a SpecError when that is every one.

    TRL drops such an example (no answer token is left to learn from), so a run where all are
    dropped would fail in its sampler with nothing to say why.
    """
    if not prompts.counts:
        return
    dropped = sum(1 for count in prompts.counts if count >= limit)
    if dropped:
        events.emit(LogEvent(f"max_length {limit} leaves no answer token in {dropped} of {len(prompts.counts)} "
                             "examples: they are not trained on", level="warning"))
    if dropped == len(prompts.counts):
        raise SpecError(f"max_length {limit} leaves no answer token in any of the {dropped} examples (the shortest "
                        f"prompt has {min(prompts.counts)} tokens): raise max_length, or set it null to derive it")


def checked_limit(lengths: Lengths, *, knob: str, limit: int | None, max_cut_share: float,
                  events: EventStream) -> int:
    """The limit to train with (`limit`, or derived when None), after reporting what it cuts.

    A SpecError names the length needed when the limit cuts more than `max_cut_share` of the texts.
    """
    if not lengths.counts:
        return limit or MARGIN_TOKENS
    resolved = lengths.derived_limit() if limit is None else limit
    cut, total = lengths.cut_by(resolved), len(lengths.counts)
    events.emit(MetricEvent(step=0, name=f"length/{knob}/cut_share", value=cut / total))
    events.emit(MetricEvent(step=0, name=f"length/{knob}/longest", value=float(max(lengths.counts))))
    source = f"derived from {lengths.source}" if limit is None else "as set"
    events.emit(LogEvent(f"{knob} {resolved} ({source}) cuts {cut} of {total} {lengths.what} "
                         f"(longest {max(lengths.counts)} tokens, 99th percentile "
                         f"{percentile([float(c) for c in lengths.counts], 99):.0f})",
                         level="warning" if cut else "info"))
    if cut / total > max_cut_share:
        raise SpecError(f"{knob} {resolved} would cut {cut} of {total} {lengths.what} (longest {max(lengths.counts)} "
                        f"tokens): set {knob} to at least {lengths.derived_limit()}, or null to derive it")
    return resolved


def report_cut(lengths: Lengths, *, knob: str, limit: int, events: EventStream) -> None:
    """Count (never refuse, never derive from) what a limit cuts: for the held-out tasks."""
    if lengths.counts and (cut := lengths.cut_by(limit)):
        events.emit(LogEvent(f"{knob} {limit} cuts {cut} of {len(lengths.counts)} held-out {lengths.what}: "
                             "those answers cannot be right", level="warning"))


def _with_answers(tasks: Sequence[Task]) -> list[Task]:
    return [task for task in tasks if task.expected_calls]


def _answer(task: Task) -> str:
    return format_tool_calls(reference_calls(task))


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])
