"""Lenient call matching shared by the `tool_call`, `binary` and `shaped` verifiers.

It pairs a completion's calls with a task's expected calls (position by position when the
task is order-sensitive, else the pairing that scores best, so parallel calls match in any
order), and for each pair says whether the tool is right and which share of the arguments
match. An argument matches when its value equals one of the accepted alternatives under
`normalise.values_equal`; an omitted argument matches when the alternatives allow omission
or the expected value is the schema's default. Extra arguments count against the share
unless they are null or the schema default. Tool names also match with dots written as
underscores (OpenAI function names cannot hold dots) when that is unambiguous.
BFCL's strict rules are in `trainer.verifiers.bfcl`, not here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import OMITTABLE, ExpectedCall, Task, ToolCall
from trainer.verifiers.normalise import values_equal

TOOL_WEIGHT = 0.4
ARGUMENTS_WEIGHT = 0.4
_EXACT_PAIRING_LIMIT = 8


@dataclass(frozen=True)
class ArgumentMatch:
    """How many of a call's arguments match; `problems` names the ones that do not."""

    matched: int
    total: int
    problems: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return 1.0 if self.total == 0 else self.matched / self.total


@dataclass(frozen=True)
class PairMatch:
    expected_index: int
    actual_index: int
    tool_matches: bool
    arguments: ArgumentMatch

    @property
    def score(self) -> float:
        return TOOL_WEIGHT * self.tool_matches + ARGUMENTS_WEIGHT * self.arguments.share

    @property
    def exact(self) -> bool:
        return self.tool_matches and self.arguments.share == 1.0


@dataclass(frozen=True)
class CallsMatch:
    """The best pairing of actual to expected calls and the shares the reward is made of."""

    pairs: list[PairMatch]
    expected_count: int
    actual_count: int
    problems: list[str]

    @property
    def slots(self) -> int:
        # Missing and extra calls each take a slot that scores nothing.
        return max(self.expected_count, self.actual_count, 1)

    @property
    def tool_share(self) -> float:
        return sum(pair.tool_matches for pair in self.pairs) / self.slots

    @property
    def argument_share(self) -> float:
        return sum(pair.arguments.share for pair in self.pairs) / self.slots

    @property
    def exact_pairs(self) -> int:
        return sum(pair.exact for pair in self.pairs)

    @property
    def complete(self) -> bool:
        return self.expected_count == self.actual_count == self.exact_pairs


def match_calls(task: Task, calls: Sequence[ToolCall]) -> CallsMatch:
    """Pair `calls` with the task's expected calls and measure every pair."""
    schemas = task.tool_schemas
    offered = set(schemas)
    table = [
        [_pair(task.expected_calls[e], e, calls[a], a, schemas, offered) for a in range(len(calls))]
        for e in range(len(task.expected_calls))
    ]
    if task.order_sensitive:
        pairs = [table[i][i] for i in range(min(len(calls), len(task.expected_calls)))]
    else:
        pairs = _best_pairing(table, len(calls))
    problems = _count_problems(task, calls, pairs, offered)
    for pair in pairs:
        problems.extend(_pair_problems(pair, task.expected_calls[pair.expected_index], calls[pair.actual_index]))
    return CallsMatch(pairs, len(task.expected_calls), len(calls), problems)


def _pair(
    expected: ExpectedCall, e: int, call: ToolCall, a: int, schemas: Mapping[str, Any], offered: set[str]
) -> PairMatch:
    schema = schemas.get(expected.name, {})
    return PairMatch(
        e, a, names_match(call.name, expected.name, offered), match_arguments(call.arguments, expected, schema)
    )


def names_match(actual: str, expected: str, offered: set[str]) -> bool:
    """Exact, or equal once dots are underscores and case is folded, if no other tool reads so."""
    if actual == expected:
        return True
    spelled = _spelling(actual)
    if spelled != _spelling(expected):
        return False
    return sum(_spelling(name) == spelled for name in offered) <= 1


def _spelling(name: str) -> str:
    return name.replace(".", "_").casefold()


def match_arguments(actual: Mapping[str, Any], expected: ExpectedCall, schema: Mapping[str, Any]) -> ArgumentMatch:
    """The share of expected arguments the call gets right, with unwanted extras counted against it."""
    defaults = _defaults(schema)
    matched, problems = 0, []
    for name, alternatives in expected.arguments.items():
        if _argument_matches(name, actual, alternatives, defaults):
            matched += 1
        else:
            problems.append(_argument_problem(name, actual, alternatives))
    extras = [name for name in actual if name not in expected.arguments and not _neutral(name, actual[name], defaults)]
    problems.extend(f"unexpected argument {name}" for name in extras)
    return ArgumentMatch(matched, len(expected.arguments) + len(extras), problems)


def _argument_matches(name: str, actual: Mapping[str, Any], alternatives: list[Any], defaults: dict[str, Any]) -> bool:
    accepted = [value for value in alternatives if value != OMITTABLE]
    omittable = OMITTABLE in alternatives or any(_is_default(name, value, defaults) for value in accepted)
    if name not in actual or actual[name] is None or actual[name] == "":
        return omittable or any(value_accepted(actual.get(name), value) for value in accepted)
    return any(value_accepted(actual[name], value) for value in accepted) or (
        OMITTABLE in alternatives and _is_default(name, actual[name], defaults)
    )


def value_accepted(actual: Any, accepted: Any) -> bool:
    """Equal to an accepted value, which may nest alternatives as BFCL's answers do.

    In BFCL answers a dict maps each key to a list of accepted values ("" when the key may
    be left out), and a list of such dicts is matched item by item.
    """
    if values_equal(actual, accepted):
        return True
    if isinstance(accepted, Mapping) and isinstance(actual, Mapping) and _is_alternatives_map(accepted):
        return all(key in accepted for key in actual) and all(
            _key_accepted(actual, key, options) for key, options in accepted.items()
        )
    if isinstance(accepted, list) and isinstance(actual, (list, tuple)) and len(actual) == len(accepted):
        return any(isinstance(item, Mapping) for item in accepted) and all(
            value_accepted(item, wanted) for item, wanted in zip(actual, accepted, strict=True)
        )
    return False


def _is_alternatives_map(value: Mapping[str, Any]) -> bool:
    return bool(value) and all(isinstance(options, list) and options for options in value.values())


def _key_accepted(actual: Mapping[str, Any], key: str, options: list[Any]) -> bool:
    if key not in actual:
        return OMITTABLE in options
    return any(value_accepted(actual[key], option) for option in options if option != OMITTABLE)


def _argument_problem(name: str, actual: Mapping[str, Any], alternatives: list[Any]) -> str:
    accepted = [value for value in alternatives if value != OMITTABLE]
    if name not in actual:
        return f"missing argument {name}"
    shown = accepted[0] if len(accepted) == 1 else accepted
    return f"argument {name} is {_short(actual[name])}, expected {_short(shown)}"


def _neutral(name: str, value: Any, defaults: dict[str, Any]) -> bool:
    return value is None or _is_default(name, value, defaults)


def _defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return {}
    return {
        name: spec["default"] for name, spec in properties.items() if isinstance(spec, Mapping) and "default" in spec
    }


def _is_default(name: str, value: Any, defaults: dict[str, Any]) -> bool:
    return name in defaults and values_equal(value, defaults[name])


def _best_pairing(table: list[list[PairMatch]], actual_count: int) -> list[PairMatch]:
    """The one-to-one pairing with the highest total score (greedy beyond a handful of calls)."""
    if not table or actual_count == 0:
        return []
    if max(len(table), actual_count) > _EXACT_PAIRING_LIMIT:
        return _greedy_pairing(table)
    # Dynamic programming over the set of actual calls already used: at most 2**8 states.
    best: dict[int, tuple[float, list[PairMatch]]] = {0: (0.0, [])}
    for row in table:
        step = dict(best)  # leaving this expected call unpaired is always an option
        for used, (total, chosen) in best.items():
            for pair in row:
                bit = 1 << pair.actual_index
                if not used & bit and total + pair.score > step.get(used | bit, (-1.0, []))[0]:
                    step[used | bit] = (total + pair.score, [*chosen, pair])
        best = step
    return max(best.values(), key=lambda entry: (entry[0], len(entry[1])))[1]


def _greedy_pairing(table: list[list[PairMatch]]) -> list[PairMatch]:
    ranked = sorted((pair for row in table for pair in row), key=lambda pair: pair.score, reverse=True)
    used_expected: set[int] = set()
    used_actual: set[int] = set()
    chosen = []
    for pair in ranked:
        if pair.expected_index not in used_expected and pair.actual_index not in used_actual:
            chosen.append(pair)
            used_expected.add(pair.expected_index)
            used_actual.add(pair.actual_index)
    return chosen


def _count_problems(task: Task, calls: Sequence[ToolCall], pairs: list[PairMatch], offered: set[str]) -> list[str]:
    problems = [
        f"unknown tool {call.name}"
        for call in calls
        if call.name not in offered and not _loosely_offered(call.name, offered)
    ]
    paired_expected = {pair.expected_index for pair in pairs}
    paired_actual = {pair.actual_index for pair in pairs}
    problems.extend(
        f"missing call to {call.name}" for index, call in enumerate(task.expected_calls) if index not in paired_expected
    )
    problems.extend(f"extra call to {call.name}" for index, call in enumerate(calls) if index not in paired_actual)
    return problems


def _loosely_offered(name: str, offered: set[str]) -> bool:
    return any(names_match(name, candidate, offered) for candidate in offered)


def _pair_problems(pair: PairMatch, expected: ExpectedCall, call: ToolCall) -> list[str]:
    if not pair.tool_matches:
        return [f"wrong tool: expected {expected.name}, got {call.name}"]
    return list(pair.arguments.problems)


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
