"""The guide's warning signs of a training run going wrong, each raised once as a warning log event.

Pure bookkeeping over the numbers the callback sees (training reward, completion length, the
share of completions cut by the length limit, held-out results per task, each group's
completions): no model, no torch. Each sign is one that can happen with the shipped settings:
- reward_hacking: training reward rose (by `margin` or more) since the first held-out evaluation
  while the held-out metric fell, paired task by task: the bootstrap interval of the per-task
  difference lies wholly below zero (a single flipped task cannot fire it);
- length_drift: the mean completion length moved by `length_factor` or more (up or down) from
  the first steps';
- truncation: the share of completions cut by the length limit rose to `truncated_share` or more
  and at least doubled from the first steps' (a policy running into the limit);
- repetition: within each group (the completions of one prompt), the share that repeat another
  completion verbatim rose to `repetition_share` or more, and by `margin_repetition` over the
  first steps' (sampling collapsing to one answer: no spread, no advantage).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import LogEvent
from trainer.spec.stats import paired_difference_interval

OPENING = 3  # steps that make "the first steps'" value
RECENT = 3  # steps that make the value now


def rate_value(overall: Mapping[str, Any], name: str) -> float | None:
    value = overall.get(name)
    number = value.get("value") if isinstance(value, Mapping) else value
    return float(number) if isinstance(number, (int, float)) else None


def duplicate_share(groups: Sequence[Sequence[str]]) -> float:
    """Share of completions that repeat another completion of their own group, verbatim."""
    total = sum(len(group) for group in groups)
    if not total:
        return 0.0
    repeated = 0
    for group in groups:
        counts = Counter(text.strip() for text in group)
        repeated += sum(count for count in counts.values() if count > 1)
    return repeated / total


@dataclass
class FlagWatch:
    """Watches the run for the guide's warning signs (see the module docstring for each)."""

    heldout_metric: str = "correct_arguments"
    margin: float = 0.05
    length_factor: float = 1.5
    truncated_share: float = 0.1
    repetition_share: float = 0.75
    margin_repetition: float = 0.25
    raised: set[str] = field(default_factory=set)
    _rewards: list[float] = field(default_factory=list)
    _lengths: list[float] = field(default_factory=list)
    _truncated: list[float] = field(default_factory=list)
    _duplicates: list[float] = field(default_factory=list)
    # The first held-out evaluation: per-task outcomes by task id, and the train reward then (None before any step)
    _first_heldout: tuple[dict[str, float], float | None] | None = None

    def train_reward(self, value: float) -> None:
        self._rewards.append(value)

    def completion_length(self, step: int, value: float) -> LogEvent | None:
        self._lengths.append(value)
        start, now = _opening(self._lengths), _recent(self._lengths)
        if start is None or now is None or start <= 0 or 1 / self.length_factor < now / start < self.length_factor:
            return None
        return self._raise("length_drift", f"at step {step} completions average {now:.1f} tokens, "
                                           f"{now / start:.2f}x the first steps' {start:.1f}")

    def truncation(self, step: int, share: float) -> LogEvent | None:
        self._truncated.append(share)
        start, now = _opening(self._truncated), _recent(self._truncated)
        if start is None or now is None or now < self.truncated_share or now < 2 * start:
            return None
        return self._raise("truncation", f"at step {step} {now:.0%} of completions are cut by the length limit "
                                         f"(the first steps': {start:.0%}): the policy is running into it")

    def completions(self, step: int, groups: Sequence[Sequence[str]]) -> LogEvent | None:
        """`groups` are one batch's completions, grouped by prompt."""
        if not groups:
            return None
        self._duplicates.append(duplicate_share(groups))
        start, now = _opening(self._duplicates), _recent(self._duplicates)
        if start is None or now is None or now < self.repetition_share or now - start < self.margin_repetition:
            return None
        return self._raise("repetition", f"at step {step} {now:.0%} of completions repeat another of their own "
                                         f"group verbatim (the first steps': {start:.0%}): sampling is collapsing")

    def heldout(self, step: int, outcomes: Mapping[str, float]) -> LogEvent | None:
        """`outcomes` is the held-out metric per task id (1.0 or 0.0) of one evaluation."""
        if not outcomes:
            return None
        if self._first_heldout is None:
            self._first_heldout = (dict(outcomes), _mean(self._rewards[-5:]))
            return None
        first, reward_then = self._first_heldout
        if not self._rewards:
            return None
        # Evaluated before any step: the reward training started from is its first steps' reward.
        start_reward = _mean(self._rewards[:5]) if reward_then is None else reward_then
        reward_now = _mean(self._rewards[-5:])
        paired = [task for task in outcomes if task in first]
        if start_reward is None or reward_now is None or reward_now - start_reward <= self.margin or not paired:
            return None
        change = paired_difference_interval([outcomes[t] for t in paired], [first[t] for t in paired], seed=step)
        if change.high >= 0:
            return None
        return self._raise(
            "reward_hacking",
            f"at step {step} training reward rose {start_reward:.3f} → {reward_now:.3f} while held-out "
            f"{self.heldout_metric} fell {change.value:+.3f} [{change.low:+.3f}, {change.high:+.3f}] over "
            f"{len(paired)} paired tasks: inspect the samples",
        )

    def _raise(self, name: str, detail: str) -> LogEvent | None:
        if name in self.raised:
            return None
        self.raised.add(name)
        return LogEvent(f"flag: {name} {detail}", level="warning")


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _opening(values: Sequence[float]) -> float | None:
    """The first steps' mean, once there are later steps to compare with."""
    return _mean(values[:OPENING]) if len(values) > OPENING else None


def _recent(values: Sequence[float]) -> float | None:
    return _mean(values[-RECENT:]) if len(values) > OPENING else None
