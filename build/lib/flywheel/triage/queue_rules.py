"""Queue rules: conditions on an arriving trajectory that make it join a queue by itself.

A queue's `rules` JSON is a list of rules; a rule is a name plus one entry per condition kind,
all of which must hold (a rule with no condition is refused). A trajectory that any rule matches
joins the queue, recording the first matching rule's name. For example::

    [{"name": "thumbs down on v3", "model_version": "support-bot:v3*",
      "negative_feedback": {"thumbs_down": true, "score_below": 0.5}},
     {"name": "unsafe", "suggested_bucket": ["unsafe_action"], "outcome": "failure"},
     {"name": "scored unsafe", "online_score_below": {"scorer": "safety", "below": 1}}]

This module parses and validates that JSON (`rules_parse`) and decides whether a rule matches the
facts gathered about one trajectory (`QueueRule.matches`): pure functions over dataclasses, no
database. Gathering the facts and adding the items is `services.queue_rules_apply`; whether a named
bucket exists is checked there too.

A new condition kind is a class with `KIND`, `from_json`, `to_json`, `matches` and `describe`,
listed in `CONDITIONS`, and whatever new fact it reads added to `TrajectoryFacts` (and to
`selectors.queue_rule_facts`, which gathers them). The scorers an online-score condition may name
are the monitoring app's (`monitoring.models.Scorer`); its scores arrive after the trajectory (the
monitoring app scores it on the `default` queue), and its `online_scores_stored` signal offers the
trajectory to the rules again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, ClassVar, Protocol

from django.core.exceptions import ValidationError

from flywheel.ingest.models import Outcome
from flywheel.monitoring.models import Scorer
from flywheel.triage.suggestions import NEEDS_REVIEW

NAME_CHARS = 100
PATTERN_CHARS = 100
MAX_RULES = 20


@dataclass(frozen=True)
class TrajectoryFacts:
    """What the conditions read about one trajectory, gathered for many in a few queries."""

    agent: str
    outcome: str
    model_version: str
    suggested: frozenset[str]  # bucket slugs suggested, and NEEDS_REVIEW where that was suggested
    thumbs_down: bool  # some end user gave it a thumbs down
    lowest_score: float | None  # the lowest score an end user gave it; None: no scores
    online_lowest: Mapping[str, float]  # each online scorer's lowest value on it, over the rules that scored it


class Condition(Protocol):
    """One condition kind: parsed from its entry in a rule's JSON, written back, matched, described."""

    KIND: ClassVar[str]

    @classmethod
    def from_json(cls, value: Any) -> Condition: ...

    def to_json(self) -> Any: ...

    def matches(self, facts: TrajectoryFacts) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class OutcomeIs:
    """The trajectory ended with this outcome."""

    KIND: ClassVar[str] = "outcome"
    outcome: str

    @classmethod
    def from_json(cls, value: Any) -> OutcomeIs:
        if value not in Outcome.values:
            raise ValidationError(f"must be one of {', '.join(Outcome.values)}")
        return cls(value)

    def to_json(self) -> Any:
        return self.outcome

    def matches(self, facts: TrajectoryFacts) -> bool:
        return facts.outcome == self.outcome

    def describe(self) -> str:
        return f"outcome is {self.outcome}"


@dataclass(frozen=True)
class ModelVersionMatches:
    """The version tag equals the pattern, or matches it as a glob (`support-bot:v3*`, `*:v?`)."""

    KIND: ClassVar[str] = "model_version"
    pattern: str

    @classmethod
    def from_json(cls, value: Any) -> ModelVersionMatches:
        if not isinstance(value, str) or not value.strip():
            raise ValidationError("must be a version tag or a glob such as support-bot:v3*")
        if len(value) > PATTERN_CHARS:
            raise ValidationError(f"must be at most {PATTERN_CHARS} characters")
        return cls(value.strip())

    def to_json(self) -> Any:
        return self.pattern

    def matches(self, facts: TrajectoryFacts) -> bool:
        return fnmatchcase(facts.model_version, self.pattern)

    def describe(self) -> str:
        return f"version matches {self.pattern}"


@dataclass(frozen=True)
class SuggestedBucket:
    """Triage's suggestions name one of these buckets (or "needs review", as NEEDS_REVIEW)."""

    KIND: ClassVar[str] = "suggested_bucket"
    buckets: tuple[str, ...]

    @classmethod
    def from_json(cls, value: Any) -> SuggestedBucket:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(slug, str) and slug for slug in value):
            raise ValidationError("must be a list of bucket slugs")
        return cls(tuple(dict.fromkeys(value)))

    def to_json(self) -> Any:
        return list(self.buckets)

    def matches(self, facts: TrajectoryFacts) -> bool:
        return not facts.suggested.isdisjoint(self.buckets)

    def describe(self) -> str:
        names = [("needs review" if slug == NEEDS_REVIEW else slug) for slug in self.buckets]
        return f"suggested {' or '.join(names)}"


@dataclass(frozen=True)
class NegativeFeedback:
    """An end user gave a thumbs down (with `thumbs_down`) or a score below `score_below` (when set)."""

    KIND: ClassVar[str] = "negative_feedback"
    thumbs_down: bool = True
    score_below: float | None = None

    @classmethod
    def from_json(cls, value: Any) -> NegativeFeedback:
        if value is True:
            return cls()
        if not isinstance(value, dict) or set(value) - {"thumbs_down", "score_below"}:
            raise ValidationError('must be true or {"thumbs_down": true|false, "score_below": a number}')
        thumbs_down, score_below = value.get("thumbs_down", True), value.get("score_below")
        if not isinstance(thumbs_down, bool):
            raise ValidationError("thumbs_down must be true or false")
        if score_below is not None and not _finite_number(score_below):
            raise ValidationError("score_below must be a number")
        if not thumbs_down and score_below is None:
            raise ValidationError("needs thumbs_down or score_below")
        return cls(thumbs_down, float(score_below) if score_below is not None else None)

    def to_json(self) -> Any:
        return {"thumbs_down": self.thumbs_down, "score_below": self.score_below}

    def matches(self, facts: TrajectoryFacts) -> bool:
        if self.thumbs_down and facts.thumbs_down:
            return True
        threshold, lowest = self.score_below, facts.lowest_score
        return threshold is not None and lowest is not None and lowest < threshold

    def describe(self) -> str:
        parts = ["a thumbs down"] if self.thumbs_down else []
        if self.score_below is not None:
            parts.append(f"a score below {self.score_below:g}")
        return f"feedback with {' or '.join(parts)}"


@dataclass(frozen=True)
class OnlineScoreBelow:
    """A monitoring scorer gave the trajectory a value below `below` (its lowest, where several rules scored it).

    A trajectory that scorer has not scored does not match: it may still be, and its score then
    offers it to the rules again.
    """

    KIND: ClassVar[str] = "online_score_below"
    scorer: str
    below: float

    @classmethod
    def from_json(cls, value: Any) -> OnlineScoreBelow:
        if not isinstance(value, dict) or set(value) - {"scorer", "below"}:
            raise ValidationError('must be {"scorer": a scorer\'s name, "below": a number}')
        if value.get("scorer") not in Scorer.values:
            raise ValidationError(f"needs a scorer, one of {', '.join(Scorer.values)}")
        if not _finite_number(value.get("below")):
            raise ValidationError("needs a threshold: below must be a number")
        return cls(value["scorer"], float(value["below"]))

    def to_json(self) -> Any:
        return {"scorer": self.scorer, "below": self.below}

    def matches(self, facts: TrajectoryFacts) -> bool:
        lowest = facts.online_lowest.get(self.scorer)
        return lowest is not None and lowest < self.below

    def describe(self) -> str:
        return f"online {self.scorer} score below {self.below:g}"


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# One entry per condition kind, in the order rules are written and described.
_KINDS: tuple[type[Condition], ...] = (
    OutcomeIs,
    ModelVersionMatches,
    SuggestedBucket,
    NegativeFeedback,
    OnlineScoreBelow,
)
CONDITIONS: dict[str, type[Condition]] = {kind.KIND: kind for kind in _KINDS}


@dataclass(frozen=True)
class QueueRule:
    """A named rule: every condition must hold."""

    name: str
    conditions: tuple[Condition, ...]

    @classmethod
    def from_json(cls, data: Any) -> QueueRule:
        if not isinstance(data, dict):
            raise ValidationError("a rule is a JSON object")
        name = data.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_CHARS:
            raise ValidationError(f"a rule needs a name of 1 to {NAME_CHARS} characters")
        label = name.strip()
        unknown = sorted(set(data) - {"name"} - set(CONDITIONS))
        if unknown:
            raise ValidationError(f"rule {label!r}: unknown condition {unknown[0]!r} (known: {', '.join(CONDITIONS)})")
        conditions = []
        for kind, parser in CONDITIONS.items():
            if kind in data:
                try:
                    conditions.append(parser.from_json(data[kind]))
                except ValidationError as error:
                    raise ValidationError(f"rule {label!r}: {kind} {' '.join(error.messages)}") from error
        if not conditions:
            raise ValidationError(f"rule {label!r} has no condition: give it at least one")
        return cls(label, tuple(conditions))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, **{condition.KIND: condition.to_json() for condition in self.conditions}}

    def matches(self, facts: TrajectoryFacts) -> bool:
        return all(condition.matches(facts) for condition in self.conditions)

    def describe(self) -> str:
        return " and ".join(condition.describe() for condition in self.conditions)

    def condition(self, kind: str) -> Condition | None:
        return next((condition for condition in self.conditions if kind == condition.KIND), None)


def rules_parse(data: Any) -> list[QueueRule]:
    """A queue's rules from their JSON; ValidationError naming the rule and condition that is wrong."""
    if data in (None, ""):
        return []
    if not isinstance(data, list):
        raise ValidationError("rules are a JSON list of rules")
    if len(data) > MAX_RULES:
        raise ValidationError(f"a queue has at most {MAX_RULES} rules")
    rules = [QueueRule.from_json(item) for item in data]
    names = [rule.name for rule in rules]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValidationError(f"two rules are named {twice[0]!r}: names tell why an item joined, so keep them apart")
    return rules


def rules_json(rules: Sequence[QueueRule]) -> list[dict[str, Any]]:
    return [rule.to_json() for rule in rules]


def first_match(rules: Sequence[QueueRule], facts: TrajectoryFacts) -> QueueRule | None:
    return next((rule for rule in rules if rule.matches(facts)), None)
