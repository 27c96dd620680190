"""Synthetic variants: each generator, each filter, the report's counts, reproducibility."""

from __future__ import annotations

import pytest

from trainer.contracts import OMITTABLE, EpisodeSetup, ExpectedCall, Task
from trainer.spec.synthetic import (
    FILTERS,
    Options,
    Variant,
    counts,
    generate,
    normalised_prompt,
    reference_answer,
    screen,
    shingles,
    similarity,
)
from trainer.verifiers import get_verifier

FACTORIAL = {"type": "function", "function": {"name": "math.factorial", "description": "Factorial of a number.",
             "parameters": {"type": "object", "properties": {"number": {"type": "integer", "minimum": 0,
                                                                       "maximum": 20}},
                            "required": ["number"]}}}  # fmt: skip
AREA = {"type": "function", "function": {"name": "geometry.area_circle", "description": "Area of a circle.",
        "parameters": {"type": "object", "properties": {
            "radius": {"type": "integer"}, "units": {"type": "string", "enum": ["meters", "feet", "units"]}},
            "required": ["radius"]}}}  # fmt: skip
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather.get",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CIRCUMFERENCE = {"type": "function", "function": {"name": "geometry.circumference",
                 "description": "Circumference of a circle.",
                 "parameters": {"type": "object", "properties": {"radius": {"type": "integer"}}}}}  # fmt: skip


def task(id_: str, request: str, tool: dict, arguments: dict) -> Task:
    name = tool["function"]["name"]
    return Task(id=id_, messages=[{"role": "user", "content": request}], tools=[tool],
                expected_calls=[ExpectedCall(name, arguments)])  # fmt: skip


def seeds() -> list[Task]:
    return [
        task("fact", "Calculate the factorial of 5 using math functions.", FACTORIAL, {"number": [5]}),
        task("fact2", "What is the factorial of 12?", FACTORIAL, {"number": [12]}),
        task("area", "Find the area of a circle with a radius of 10.", AREA,
             {"radius": [10], "units": [OMITTABLE, "units"]}),
        task("rain", "Will it rain in Paris tomorrow?", WEATHER, {"city": ["Paris"]}),
        task("rain2", "Is it sunny in Berlin?", WEATHER, {"city": ["Berlin"]}),
    ]  # fmt: skip


def of(variants: list[Variant], method: str, seed_id: str) -> list[Variant]:
    return [variant for variant in variants if variant.method == method and variant.seed_id == seed_id]


def request(variant: Variant) -> str:
    return variant.task.messages[-1]["content"]


def test_a_value_variant_changes_the_request_and_the_expected_call_together():
    variants = generate(seeds(), Options(methods=("values",)))
    [fact] = of(variants, "values", "fact")
    new = fact.task.expected_calls[0].arguments["number"]
    assert new == [12]  # the value another seed gives the same tool's argument
    assert request(fact) == "Calculate the factorial of 12 using math functions."
    assert fact.change == "math.factorial.number: 5 → 12"
    [rain] = of(variants, "values", "rain")
    assert request(rain) == "Will it rain in Berlin tomorrow?" and rain.task.expected_calls[0].arguments == {
        "city": ["Berlin"]
    }


def test_a_value_not_written_once_in_the_request_is_never_substituted():
    twice = task("twice", "Add 5 and 5.", FACTORIAL, {"number": [5]})
    unwritten = task("five", "The factorial of five, please.", FACTORIAL, {"number": [5]})
    inside = task("inside", "Factorial of 15 is not wanted; give the factorial of 2.", FACTORIAL, {"number": [5]})
    assert generate([twice, unwritten, inside], Options(methods=("values", "boundary"))) == []


def test_boundary_variants_use_the_schemas_bounds_and_enum_ends():
    variants = generate(seeds(), Options(methods=("boundary",), per_method=5))
    values = sorted(v.task.expected_calls[0].arguments["number"][0] for v in of(variants, "boundary", "fact"))
    assert values == [0, 20]
    assert {request(v) for v in of(variants, "boundary", "fact")} == {
        "Calculate the factorial of 0 using math functions.",
        "Calculate the factorial of 20 using math functions.",
    }


def test_an_omittable_argument_is_asked_for_explicitly():
    [area] = of(generate(seeds(), Options(methods=("optional",))), "optional", "area")
    assert request(area).endswith(" Use units = units.")
    assert area.task.expected_calls[0].arguments["units"] == ["units"]


def test_distractors_are_the_most_similar_catalogue_tools_and_leave_the_call_alone():
    [area] = of(generate(seeds(), Options(methods=("distractors",), catalogue=(CIRCUMFERENCE,))), "distractors", "area")
    names = {tool["function"]["name"] for tool in area.task.tools}
    assert "geometry.circumference" in names and "geometry.area_circle" in names and len(names) == 3
    assert area.task.expected_calls == seeds()[2].expected_calls and request(area) == request_of(seeds()[2])


def request_of(task_: Task) -> str:
    return task_.messages[-1]["content"]


def test_paraphrases_keep_questions_questions_and_the_values_written():
    variants = generate(seeds(), Options(methods=("paraphrase",), per_method=10))
    for variant in of(variants, "paraphrase", "fact2"):
        assert "12" in request(variant) and not request(variant).startswith(("Please", "Help me", "I need"))
    assert "Compute the factorial of 5 using math functions." in {
        request(v) for v in of(variants, "paraphrase", "fact")
    }


def test_generation_is_reproducible_and_the_seed_matters():
    first, again = generate(seeds(), Options(seed=3)), generate(seeds(), Options(seed=3))
    assert [v.task.to_json() for v in first] == [v.task.to_json() for v in again]
    others = [generate(seeds(), Options(seed=seed)) for seed in range(4, 10)]
    assert any([v.task.to_json() for v in other] != [v.task.to_json() for v in first] for other in others)


def test_episode_tasks_seed_nothing():
    episode = task("ep", "Calculate the factorial of 5.", FACTORIAL, {"number": [5]})
    episode = Task(id="ep", messages=episode.messages, tools=episode.tools, expected_calls=episode.expected_calls,
                   episode=EpisodeSetup(environment="workbench"))  # fmt: skip
    assert generate([episode], Options()) == []


def test_unknown_methods_and_bad_thresholds_are_refused():
    with pytest.raises(ValueError, match="unknown method"):
        Options(methods=("telepathy",))
    with pytest.raises(ValueError, match="thresholds"):
        Options(threshold=0.0)


# --- filters ------------------------------------------------------------------------------


def variant(task_: Task, method: str = "values") -> Variant:
    return Variant(task_, "seed", method, "")


def rejections(items) -> list[str | None]:
    return [item.rejection.filter if item.rejection else None for item in items]


VERIFIER = get_verifier("tool_call")


def test_a_call_that_breaks_its_schema_is_rejected_by_the_schema_filter():
    bad = task("bad", "Factorial of five.", FACTORIAL, {"number": ["five"]})
    [item] = screen([variant(bad)], verifier=VERIFIER)
    assert item.rejection.filter == "schema" and "must be integer" in item.rejection.reason


def test_the_callers_own_check_joins_the_schema_filter():
    good = task("good", "Factorial of 5.", FACTORIAL, {"number": [5]})
    [item] = screen([variant(good)], verifier=VERIFIER, extra_check=lambda t: ["the app says no"])
    assert (item.rejection.filter, item.rejection.reason) == ("schema", "the app says no")


def test_a_call_the_verifier_fails_is_rejected_by_the_verifier_filter():
    """The safety policy's default forbids deleting everything: the expected call is unsafe."""
    wipe = {"type": "function", "function": {"name": "delete_all_records", "parameters": {"type": "object"}}}
    unsafe = task("wipe", "Delete all records.", wipe, {})
    [item] = screen([variant(unsafe)], verifier=VERIFIER)
    assert item.rejection is not None and item.rejection.filter == "verifier", item.rejection


def test_the_same_task_as_a_train_task_is_rejected():
    copy = seeds()[0]
    [item] = screen([variant(copy)], verifier=VERIFIER, train=seeds())
    assert item.rejection.filter == "train_duplicate" and "fact" in item.rejection.reason


def test_a_near_duplicate_of_a_held_out_task_is_rejected_though_not_identical():
    heldout = [task("held", "Calculate the factorial of 7 using math functions!", FACTORIAL, {"number": [7]})]
    close = task("close", "Calculate the factorial of 9 using math functions.", FACTORIAL, {"number": [9]})
    far = task("far", "Will it rain in Oslo tomorrow?", WEATHER, {"city": ["Oslo"]})
    items = screen([variant(close), variant(far)], verifier=VERIFIER, heldout=heldout)
    assert rejections(items) == ["heldout_near_duplicate", None]
    assert "held-out task held" in items[0].rejection.reason
    assert rejections(screen([variant(close)], verifier=VERIFIER, heldout=[])) == [None]


def test_a_variant_close_to_an_earlier_kept_one_is_rejected_the_first_kept():
    one = task("one", "Calculate the factorial of 9 using math functions.", FACTORIAL, {"number": [9]})
    two = task("two", "Please calculate the factorial of 9 using math functions.", FACTORIAL, {"number": [9]})
    other = task("other", "Will it rain in Oslo tomorrow?", WEATHER, {"city": ["Oslo"]})
    items = screen([variant(one), variant(two), variant(other)], verifier=VERIFIER)
    assert rejections(items) == [None, "near_duplicate", None]
    assert "variant one" in items[1].rejection.reason


def test_equal_leakage_text_is_similarity_one():
    left = normalised_prompt([{"role": "user", "content": "Factorial of 5, please!"}])
    right = normalised_prompt([{"role": "user", "content": "factorial of 5 please"}])
    assert left == right and similarity(shingles(left), shingles(right)) == 1.0


def test_the_reference_answer_of_every_generated_variant_passes_unless_a_filter_says_why():
    items = screen(generate(seeds(), Options()), verifier=VERIFIER, train=seeds())
    assert items and all(item.rejection is None or item.rejection.reason for item in items)
    passed = [item for item in items if item.accepted]
    verdicts = VERIFIER.verify([i.variant.task for i in passed], [reference_answer(i.variant.task) for i in passed])
    assert all(verdict.passed for verdict in verdicts)


def test_counts_name_every_filter_and_add_up():
    heldout = [task("held", "Calculate the factorial of 7 using math functions!", FACTORIAL, {"number": [7]})]
    items = screen(generate(seeds(), Options()), verifier=VERIFIER, train=seeds(), heldout=heldout)
    report = counts(items)
    assert set(report["rejected"]) == set(FILTERS)
    assert report["generated"] == len(items) == report["accepted"] + sum(report["rejected"].values())
    assert report["rejected"]["heldout_near_duplicate"] >= 1
    assert report["accepted"] == sum(report["accepted_by_method"].values())
