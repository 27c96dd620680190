"""Systematic perturbations of BFCL ground truth, for comparing checkers without model outputs.

For each task it builds the minimal correct answer (first accepted value of every argument,
omittable ones left out) and variants of it: other accepted values, string spellings BFCL
normalises away, wrong values, wrong types (int for float and back, numbers as strings,
lists as tuples, bools as ints, None), missing and extra arguments, a wrong function,
dict keys dropped or added, extra, missing and reordered calls, and no call at all.
Each variant carries the verdict BFCL's rules give it when that is certain from how it
was built (`expected_pass`), else None. Rendering gives the text a model would emit:
BFCL's Python-call prompt format or OpenAI `tool_calls` JSON.
Variants are deterministic per task id and seed. Nothing here scores anything.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainer.contracts import OMITTABLE, ExpectedCall, Task, ToolCall

EXTRA_ARGUMENT = "unrequested_flag"
FUZZ_ROUNDS = 4


@dataclass(frozen=True)
class Variant:
    """One perturbed answer to a task, and BFCL's verdict on it when known in advance."""

    task_id: str
    kind: str
    calls: list[ToolCall]
    expected_pass: bool | None


def first_accepted(alternatives: list[Any]) -> Any:
    return next((value for value in alternatives if value != OMITTABLE), OMITTABLE)


def resolved(value: Any, pick: Callable[[list[Any]], Any]) -> Any:
    """A concrete value from an accepted one whose dicts may hold alternatives per key."""
    if isinstance(value, dict):
        concrete = {}
        for key, options in value.items():
            options = options if isinstance(options, list) else [options]
            chosen = pick(options)
            if chosen != OMITTABLE:
                concrete[key] = resolved(chosen, pick)
        return concrete
    if isinstance(value, list):
        return [resolved(item, pick) for item in value]
    return value


def answer_calls(
    task: Task, pick: Callable[[list[Any]], Any] = first_accepted, keep_optional: bool = False
) -> list[ToolCall]:
    """A correct answer: one accepted value per argument; omittable ones dropped unless kept.

    A few BFCL answers mark a required parameter omittable; those are always given.
    """
    schemas = task.tool_schemas
    calls = []
    for expected in task.expected_calls:
        required = set(schemas.get(expected.name, {}).get("required") or [])
        arguments = {}
        for name, alternatives in expected.arguments.items():
            if OMITTABLE in alternatives and not keep_optional and name not in required:
                continue
            chosen = pick(alternatives)
            if chosen != OMITTABLE:
                arguments[name] = resolved(chosen, pick)
        calls.append(ToolCall(expected.name, arguments))
    return calls


def variants(task: Task, seed: int = 0) -> Iterator[Variant]:
    """Every applicable perturbation of the task's answer, in a fixed order."""
    rng = random.Random(f"{seed}:{task.id}")
    base = answer_calls(task)
    yield Variant(task.id, "ground_truth", base, None)
    yield Variant(task.id, "with_optional_arguments", answer_calls(task, keep_optional=True), None)
    yield Variant(
        task.id, "other_alternatives", answer_calls(task, pick=lambda options: _random_pick(rng, options)), None
    )
    yield Variant(task.id, "no_call", [], False)
    for kind, mutate in _ARGUMENT_MUTATIONS.items():
        variant = _mutate_one_argument(task, base, rng, kind, mutate)
        if variant is not None:
            yield variant
    yield from _call_level_variants(task, base, rng)
    for round_number in range(FUZZ_ROUNDS):
        yield _fuzzed(task, base, rng, round_number)


def _random_pick(rng: random.Random, options: list[Any]) -> Any:
    concrete = [value for value in options if value != OMITTABLE]
    return rng.choice(concrete) if concrete else OMITTABLE


# --- argument-level mutations ---------------------------------------------------------------
# Each returns (new value, whether BFCL accepts it, or None when unknown) or None if not applicable.
Mutation = Callable[[Any, list[Any], Mapping[str, Any], random.Random], "tuple[Any, bool | None] | None"]


def _string_respelled(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, str) or not value.strip() or _kind(spec) != "string":
        return None
    respelled = value.upper().replace(" ", "  ") + "."
    # Some letters (German sharp s) do not survive a round trip through upper case.
    return respelled, True if respelled.lower().strip(".") == value.lower().replace(" ", "  ") else None


def _string_replaced(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, str) or _kind(spec) != "string":
        return None
    replacement = value + " extra"
    return replacement, None if _any_string_is(replacement, accepted) else False


def _number_changed(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    changed = value + rng.choice([1, 2, 7])
    return changed, None if changed in accepted else False


def _int_as_float(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if type(value) is not int or _kind(spec) != "integer":
        return None
    # An answer written as a float makes BFCL compare a float value exactly instead of rejecting it.
    return float(value), None if any(type(option) is float for option in accepted) else False


def _float_as_int(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if type(value) is not float or not value.is_integer() or _kind(spec) not in ("number", "float"):
        return None
    return int(value), True


def _number_as_string(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return str(value), None if any(isinstance(option, str) for option in accepted) else False


def _bool_as_int(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, bool):
        return None
    return int(value), False


def _bool_flipped(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, bool):
        return None
    return (not value), None if (not value) in accepted else False


def _list_as_tuple(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, list):
        return None
    return tuple(value), True if _kind(spec) == "tuple" else None


def _list_reversed(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, list) or len(value) < 2 or value == value[::-1]:
        return None
    return value[::-1], None


def _list_item_dropped(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, list) or not value:
        return None
    shorter = value[:-1]
    return shorter, None if shorter in accepted else False


def _list_items_as_float(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, list) or not value or not all(type(item) is int for item in value):
        return None
    return [float(item) for item in value], None


def _value_none(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    return None, None if None in accepted else False


def _dict_key_dropped(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, dict) or not value:
        return None
    smaller = dict(value)
    smaller.pop(rng.choice(sorted(smaller)))
    return smaller, None


def _dict_key_added(value: Any, accepted: list[Any], spec: Mapping[str, Any], rng: random.Random):
    if not isinstance(value, dict):
        return None
    return {**value, EXTRA_ARGUMENT: 1}, False


_ARGUMENT_MUTATIONS: dict[str, Mutation] = {
    "string_respelled": _string_respelled,
    "string_replaced": _string_replaced,
    "number_changed": _number_changed,
    "int_as_float": _int_as_float,
    "float_as_int": _float_as_int,
    "number_as_string": _number_as_string,
    "bool_as_int": _bool_as_int,
    "bool_flipped": _bool_flipped,
    "list_as_tuple": _list_as_tuple,
    "list_reversed": _list_reversed,
    "list_item_dropped": _list_item_dropped,
    "list_items_as_float": _list_items_as_float,
    "value_none": _value_none,
    "dict_key_dropped": _dict_key_dropped,
    "dict_key_added": _dict_key_added,
}


def _mutate_one_argument(task: Task, base: list[ToolCall], rng: random.Random, kind: str, mutate: Mutation):
    candidates = [(index, name) for index, call in enumerate(base) for name in sorted(call.arguments)]
    rng.shuffle(candidates)
    schemas = task.tool_schemas
    for index, name in candidates:
        call = base[index]
        spec = (schemas.get(call.name, {}).get("properties") or {}).get(name, {})
        accepted = task.expected_calls[index].arguments.get(name, [])
        outcome = mutate(call.arguments[name], accepted, spec, rng)
        if outcome is None:
            continue
        value, expected_pass = outcome
        # Another expected call may accept the mutated call, so only single-call tasks keep the label.
        label = expected_pass if len(base) == 1 else None
        return Variant(task.id, kind, _replaced(base, index, {**call.arguments, name: value}), label)
    return None


def _replaced(calls: list[ToolCall], index: int, arguments: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(call.name, arguments) if position == index else call for position, call in enumerate(calls)]


def _kind(spec: Mapping[str, Any]) -> str:
    return str(spec.get("x-bfcl-type") or spec.get("type") or "any")


def _any_string_is(text: str, accepted: list[Any]) -> bool:
    squeezed = "".join(ch for ch in text.lower() if ch not in " ,./-_*^")
    return any(
        isinstance(option, str) and "".join(ch for ch in option.lower() if ch not in " ,./-_*^") == squeezed
        for option in accepted
    )


def _fuzzed(task: Task, base: list[ToolCall], rng: random.Random, round_number: int) -> Variant:
    """One argument of one call replaced by a value of a random type built from the original."""
    index = rng.randrange(len(base))
    call = base[index]
    if not call.arguments:
        return Variant(task.id, "fuzzed_type", base, None)
    name = rng.choice(sorted(call.arguments))
    value = call.arguments[name]
    pool = [
        str(value),
        [value],
        (value,),
        {"value": value},
        None,
        True,
        0,
        -1.5,
        "",
        [],
        [str(value)],
        value if not isinstance(value, list) else [str(item) for item in value],
        value if not isinstance(value, list) else [[item] for item in value],
    ]
    return Variant(task.id, "fuzzed_type", _replaced(base, index, {**call.arguments, name: rng.choice(pool)}), None)


# --- call-level mutations ------------------------------------------------------------------


def _call_level_variants(task: Task, base: list[ToolCall], rng: random.Random) -> Iterator[Variant]:
    index = rng.randrange(len(base))
    call = base[index]
    expected = task.expected_calls[index]
    schema = task.tool_schemas.get(call.name, {})
    yield Variant(
        task.id, "extra_unknown_argument", _replaced(base, index, {**call.arguments, EXTRA_ARGUMENT: True}), False
    )
    required = [name for name in schema.get("required") or [] if name in call.arguments]
    if required:
        removed = rng.choice(required)
        dropped = {key: value for key, value in call.arguments.items() if key != removed}
        yield Variant(task.id, "missing_required_argument", _replaced(base, index, dropped), _single(base, False))
    unrequested = _unrequested_parameter(schema, expected)
    if unrequested is not None:
        arguments = {**call.arguments, unrequested: _placeholder(schema["properties"][unrequested])}
        yield Variant(task.id, "extra_schema_argument", _replaced(base, index, arguments), _single(base, False))
    others = sorted(name for name in task.tool_schemas if name != call.name)
    renamed = rng.choice(others) if others else call.name + "_v2"
    yield Variant(task.id, "wrong_function", _replaced_name(base, index, renamed), _single(base, False))
    yield Variant(task.id, "extra_call", [*base, base[index]], False)
    if len(base) > 1:
        yield Variant(task.id, "missing_call", [c for position, c in enumerate(base) if position != index], False)
        yield Variant(task.id, "calls_reversed", base[::-1], None)
        shuffled = list(base)
        rng.shuffle(shuffled)
        yield Variant(task.id, "calls_shuffled", shuffled, None)


def _single(base: list[ToolCall], verdict: bool) -> bool | None:
    return verdict if len(base) == 1 else None


def _unrequested_parameter(schema: Mapping[str, Any], expected: ExpectedCall) -> str | None:
    properties = schema.get("properties") or {}
    missing = sorted(name for name in properties if name not in expected.arguments)
    return missing[0] if missing else None


def _placeholder(spec: Mapping[str, Any]) -> Any:
    kinds = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}
    return kinds.get(str(spec.get("type")), "placeholder")


def _replaced_name(calls: list[ToolCall], index: int, name: str) -> list[ToolCall]:
    return [ToolCall(name, call.arguments) if position == index else call for position, call in enumerate(calls)]


# --- rendering -----------------------------------------------------------------------------


def as_python(calls: list[ToolCall]) -> str:
    """BFCL's prompt format: [name(arg=value, ...), ...] with Python literals."""
    rendered = (
        f"{call.name}({', '.join(f'{key}={value!r}' for key, value in call.arguments.items())})" for call in calls
    )
    return "[" + ", ".join(rendered) + "]"


def as_json_text(calls: list[ToolCall]) -> str:
    """Calls as a JSON array of {"name", "arguments"} objects, as many chat models write them."""
    return json.dumps([call.to_json() for call in calls])


FORMATS: dict[str, Callable[[list[ToolCall]], str]] = {
    "multiline": lambda calls: as_python(calls).replace("), ", "),\n    ").replace("[", "[\n    ", 1),
    "bare_calls": lambda calls: as_python(calls)[1:-1],
    "code_fence": lambda calls: f"```python\n{as_python(calls)}\n```",
    "plain_fence": lambda calls: f"```\n{as_python(calls)}\n```",
    "prose_before": lambda calls: f"Sure, here is the call:\n{as_python(calls)}",
    "tool_call_tags": lambda calls: f"<tool_call>{as_python(calls)}</tool_call>",
    "reasoning_first": lambda calls: f"<think>The user wants this.</think>{as_python(calls)}",
    "json_text": as_json_text,
    "json_literals": lambda calls: as_python(calls).replace("True", "true").replace("False", "false"),
}
"""Ways real models write the same correct calls in the prompt format; BFCL's decoder reads some."""


def as_openai(calls: list[ToolCall]) -> dict[str, Any]:
    """An OpenAI assistant message whose tool_calls carry JSON-string arguments."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for index, call in enumerate(calls)
        ],
    }


def as_bfcl_decoded(calls: list[ToolCall]) -> list[dict[str, Any]]:
    """What BFCL's function-calling handlers hand its checker: [{name: {args}}], JSON types."""
    return [{call.name: json.loads(json.dumps(call.arguments))} for call in calls]
