"""The guide's warning signs of a training run going wrong, each raised once as a warning log event.

Pure bookkeeping over the numbers the callback sees (training reward, completion length,
held-out rates, a batch's completions): no model, no torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import LogEvent


def rate_value(overall: Mapping[str, Any], name: str) -> float | None:
    value = overall.get(name)
    number = value.get("value") if isinstance(value, Mapping) else value
    return float(number) if isinstance(number, (int, float)) else None


@dataclass
class FlagWatch:
    """Watches the run for the guide's warning signs; each flag is raised once, as a warning log event.

    - reward_hacking: training reward rose while the held-out metric fell since the first evaluation;
    - length_drift: completion length moved far (x`length_factor`) from its first steps;
    - repetition: many completions in a batch repeat another prompt's completion verbatim.
    """

    heldout_metric: str = "correct_arguments_rate"
    margin: float = 0.05
    length_factor: float = 2.0
    repetition_share: float = 0.5
    raised: set[str] = field(default_factory=set)
    _rewards: list[float] = field(default_factory=list)
    _lengths: list[float] = field(default_factory=list)
    # (held-out value, train reward then); None before any training step (the step-0 evaluation)
    _heldout: list[tuple[float, float | None]] = field(default_factory=list)

    def train_reward(self, value: float) -> None:
        self._rewards.append(value)

    def completion_length(self, step: int, value: float) -> LogEvent | None:
        self._lengths.append(value)
        if len(self._lengths) <= 3:
            return None
        start = sum(self._lengths[:3]) / 3
        if start <= 0 or 1 / self.length_factor <= value / start <= self.length_factor:
            return None
        return self._raise("length_drift", f"at step {step} completions average {value:.1f} tokens, "
                                           f"{value / start:.1f}x the first steps' {start:.1f}")

    def heldout(self, step: int, overall: Mapping[str, Any]) -> LogEvent | None:
        value = rate_value(overall, self.heldout_metric)
        if value is None:
            return None
        self._heldout.append((value, self._recent_reward() if self._rewards else None))
        if len(self._heldout) < 2 or not self._rewards:
            return None
        (first_value, first_reward), (last_value, _) = self._heldout[0], self._heldout[-1]
        # Evaluated before any step: the reward training started from is its first steps' reward.
        first_reward = self._opening_reward() if first_reward is None else first_reward
        last_reward = self._recent_reward()
        if last_reward - first_reward > self.margin and first_value - last_value > self.margin:
            return self._raise(
                "reward_hacking",
                f"at step {step} training reward rose {first_reward:.3f} → {last_reward:.3f} while held-out "
                f"{self.heldout_metric} fell {first_value:.3f} → {last_value:.3f}: inspect the samples",
            )
        return None

    def completions(self, step: int, rows: Sequence[tuple[str, str]]) -> LogEvent | None:
        """`rows` are (task id, completion) pairs of one batch."""
        tasks_by_text: dict[str, set[str]] = {}
        for task_id, text in rows:
            tasks_by_text.setdefault(text.strip(), set()).add(task_id)
        repeated = sum(1 for _task, text in rows if len(tasks_by_text[text.strip()]) > 1)
        if not rows or repeated / len(rows) < self.repetition_share:
            return None
        top, count = Counter(text.strip() for _task, text in rows).most_common(1)[0]
        return self._raise("repetition", f"at step {step} {repeated} of {len(rows)} completions repeat another "
                                         f"prompt's verbatim (most common, {count}x: {top[:80]!r})")

    def _recent_reward(self) -> float:
        window = self._rewards[-5:]
        return sum(window) / len(window)

    def _opening_reward(self) -> float:
        window = self._rewards[:5]
        return sum(window) / len(window)

    def _raise(self, name: str, detail: str) -> LogEvent | None:
        if name in self.raised:
            return None
        self.raised.add(name)
        return LogEvent(f"flag: {name} {detail}", level="warning")
