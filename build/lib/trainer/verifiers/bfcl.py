"""The `bfcl` verifier: BFCL's AST-checker semantics, strict, for benchmark-comparable scores.

Written from BFCL's documented rules and black-box tests against its checker, not from
its code. A completion passes when:
- it makes exactly as many calls as expected; several calls are paired first-fit, each
  expected call (in order) taking the first unused call that matches, as BFCL does;
- each call has the exact expected name, every required parameter, and no parameter
  that is outside the schema or absent from the expected answer;
- each value has the schema's type, with BFCL's coercions: an int is accepted for a float
  (not the reverse, and bool is never a number), a tuple for a tuple-typed parameter, and
  a value of the answer's own type (a variable name written as a string) is compared
  exactly; list items are type-checked one level deep;
- each value is one of the accepted alternatives: strings (also inside lists and dicts)
  after BFCL's normalisation (lowercase, drop spaces and `,./-_*^`, single quote as
  double); dicts key by key; lists of dicts item by item; `""` among the alternatives lets
  the parameter be omitted.
A task that expects no call passes when no call can be read from the output.
Schema types may be JSON Schema's (number, object, array) or BFCL's (float, dict, tuple,
any); `x-bfcl-type` on a property overrides `type`. Lenient matching is `tool_call`'s job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, ClassVar, cast

from trainer.contracts import OMITTABLE, ExpectedCall, Task, ToolCall, Verdict
from trainer.parsing import parse_tool_calls
from trainer.verifiers.base import UNPARSEABLE_REASON, Completion, Verifier

_PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "number": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "object": dict,
    "any": str,
}
_FLOAT_KINDS = frozenset({"float", "number"})
_DICT_KINDS = frozenset({"dict", "object"})
_STANDARDISE = re.compile(r"[ ,./\-_*^]")


@lru_cache(maxsize=65536)
def standardise(text: str) -> str:
    """BFCL's string normalisation: drop spaces and ,./-_*^, lowercase, ' as "."""
    return _STANDARDISE.sub("", text).lower().replace("'", '"')


def _kind(spec: Mapping[str, Any]) -> str:
    kind = spec.get("x-bfcl-type") or spec.get("type") or "any"
    return kind if isinstance(kind, str) else "any"


class BfclVerifier(Verifier):
    name: ClassVar[str] = "bfcl"
    floor: ClassVar[float] = 0.0

    def score(self, task: Task, completion: Completion) -> Verdict:
        parsed = parse_tool_calls(completion)
        if task.no_call_expected:
            return _abstention(task, parsed.calls)
        if not parsed.ok:
            return _verdict(task, f"{UNPARSEABLE_REASON}: {parsed.error}")
        return _verdict(task, check_calls(task, parsed.calls))

    def check(self, task: Task, calls: Sequence[ToolCall]) -> Verdict:
        """The verdict on calls already decoded, as BFCL's checker receives them."""
        if task.no_call_expected:
            return _abstention(task, calls)
        return _verdict(task, check_calls(task, calls))


def check_calls(task: Task, calls: Sequence[ToolCall]) -> str | None:
    """Why the calls fail the task under BFCL's rules, or None when they pass."""
    expected = task.expected_calls
    if len(calls) != len(expected):
        return f"wrong number of calls: expected {len(expected)}, got {len(calls)}"
    schemas = task.tool_schemas
    unused = list(range(len(calls)))
    for index, expected_call in enumerate(expected):
        if expected_call.name not in schemas:
            return f"task error: expected tool {expected_call.name} is not among the task's tools"
        problems = []
        for position in unused:
            problem = check_call(calls[position], expected_call, schemas[expected_call.name])
            if problem is None:
                unused.remove(position)
                break
            problems.append(problem)
        else:
            detail = f": {problems[0]}" if len(expected) == 1 else ""
            return f"no call matches expected call {index + 1} ({expected_call.name}){detail}"
    return None


def check_call(call: ToolCall, expected: ExpectedCall, schema: Mapping[str, Any]) -> str | None:
    """Why one call fails one expected call, or None when it matches."""
    if call.name != expected.name:
        return f"wrong function name: expected {expected.name}, got {call.name}"
    properties = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in call.arguments:
            return f"missing required parameter {name}"
    for name, value in call.arguments.items():
        if name not in properties or name not in expected.arguments:
            return f"unexpected parameter {name}"
        problem = check_parameter(name, value, properties[name], expected.arguments[name])
        if problem is not None:
            return problem
    for name, alternatives in expected.arguments.items():
        if name not in call.arguments and OMITTABLE not in alternatives:
            return f"parameter {name} is missing and may not be omitted"
    return None


def check_parameter(name: str, value: Any, spec: Mapping[str, Any], alternatives: list[Any]) -> str | None:
    """Why a parameter value fails its type or accepted values, or None when it passes."""
    kind = _kind(spec)
    expected_type = _PYTHON_TYPES.get(kind, str)
    if kind in _FLOAT_KINDS and type(value) is int:
        value = float(value)
    if kind == "tuple" and type(value) is tuple:
        value = list(value)
    if type(value) is not expected_type:
        if type(value) is _answer_type(alternatives):
            # The model passed a variable by name; BFCL accepts it when the answer does the same.
            return None if value in alternatives else _invalid(name, value)
        return f"wrong type for {name}: expected {kind}, got {type(value).__name__}"
    if expected_type is list:
        problem = _item_type_problem(name, cast(list[Any], value), spec.get("items"), alternatives)
        if problem is not None:
            return problem
    return None if _value_accepted(value, spec, alternatives) else _invalid(name, value)


def _answer_type(alternatives: list[Any]) -> type | None:
    for alternative in alternatives:
        if alternative != OMITTABLE:
            return type(alternative)
    return None


def _item_type_problem(name: str, value: list[Any], items: Any, alternatives: list[Any]) -> str | None:
    """Items must have the schema's item type, or the type of an accepted list's first item.

    An accepted value that is not a list (such as the omittable "") waives the check, as in BFCL.
    """
    if not isinstance(items, Mapping):
        return None
    item_type = _PYTHON_TYPES.get(_kind(items), str)
    for option in alternatives:
        if not isinstance(option, list):
            return None
        option_type = _answer_type(option)
        if all(type(item) is item_type or type(item) is option_type for item in value):
            return None
    return f"wrong item type in {name}: expected {_kind(items)} items"


def _value_accepted(value: Any, spec: Mapping[str, Any], alternatives: list[Any]) -> bool:
    if isinstance(value, str):
        return standardise(value) in _standardised(alternatives)
    if isinstance(value, list):
        items = spec.get("items")
        if isinstance(items, Mapping) and _kind(items) in _DICT_KINDS:
            return any(_dict_list_accepted(value, option) for option in alternatives if isinstance(option, list))
        return _list_accepted(value, alternatives)
    if isinstance(value, dict):
        return any(_dict_accepted(value, option) for option in alternatives if isinstance(option, dict))
    return value in alternatives


def _standardised(values: Sequence[Any]) -> list[Any]:
    return [standardise(item) if isinstance(item, str) else item for item in values]


def _list_accepted(value: list[Any], alternatives: list[Any]) -> bool:
    wanted = _standardised(value)
    return any(isinstance(option, list) and _standardised(option) == wanted for option in alternatives)


def _dict_accepted(value: dict[str, Any], option: Mapping[str, Any]) -> bool:
    if any(key not in option for key in value):
        return False
    for key, accepted in option.items():
        accepted = accepted if isinstance(accepted, list) else [accepted]
        if key not in value:
            if OMITTABLE not in accepted:
                return False
        elif isinstance(value[key], str):
            if standardise(value[key]) not in _standardised(accepted):
                return False
        elif value[key] not in accepted:
            return False
    return True


def _dict_list_accepted(value: list[Any], option: list[Any]) -> bool:
    if len(value) != len(option):
        return False
    return all(
        isinstance(wanted, Mapping) and _dict_accepted(item, wanted) for item, wanted in zip(value, option, strict=True)
    )


def _invalid(name: str, value: Any) -> str:
    shown = repr(value)
    return f"invalid value for {name}: {shown if len(shown) <= 60 else shown[:57] + '...'}"


def _abstention(task: Task, calls: Sequence[ToolCall]) -> Verdict:
    if calls:
        names = ", ".join(call.name for call in calls)
        return _verdict(task, f"no call was expected, got {names}")
    return _verdict(task, None)


def _verdict(task: Task, problem: str | None) -> Verdict:
    passed = problem is None
    return Verdict(
        id=task.id,
        reward=1.0 if passed else 0.0,
        passed=passed,
        components={"ast_match": 1.0 if passed else 0.0},
        reason=problem or "passes BFCL's AST rules",
    )
