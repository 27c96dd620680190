"""Synthetic variants: each generator, each filter, the report's counts, reproducibility."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.contracts import OMITTABLE, EpisodeSetup, ExpectedCall, Task, ToolCall
from trainer.environments import Judgement, StepResult, make_environment
from trainer.environments.base import Environment
from trainer.environments.workbench import WorkbenchEnvironment, load_data
from trainer.spec.synthetic import (
    FILTERS,
    NO_ENVIRONMENT,
    EnvironmentFilter,
    Options,
    Variant,
    counts,
    environment_rejection,
    generate,
    normalised_prompt,
    reference_answer,
    screen,
    shingles,
    similarity,
)
from trainer.spec.workbench import tools_by_domain
from trainer.verifiers import get_verifier
from trainer.verifiers.safety import RecipientRule, SafetyPolicy

EXTERNAL = Path(__file__).resolve().parents[4] / "shared" / "external"

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


ROUND = {"type": "function", "function": {"name": "math.round", "description": "Round a number.",
         "parameters": {"type": "object", "properties": {"value": {"type": "number"},
                                                         "digits": {"type": "integer", "default": 2}},
                        "required": ["value"]}}}  # fmt: skip


def test_an_optional_argument_the_seed_accepts_omitted_is_left_out_and_still_passes_the_verifier():
    rounded = task("round", "Round 3.14159 to 2 digits.", ROUND, {"value": [3.14159], "digits": [2]})
    other_digits = task("round3", "Round 2.71828 to 3 digits.", ROUND, {"value": [2.71828], "digits": [3]})
    circle = task("circle", "Circumference of a circle of radius 4.", CIRCUMFERENCE, {"radius": [4]})
    strict = {"type": "function", "function": {**ROUND["function"], "name": "math.round_strict", "parameters": {
        **ROUND["function"]["parameters"], "required": ["value", "digits"]}}}  # fmt: skip
    required = task("strict", "Round 1.41421 to 2 digits.", strict, {"value": [1.41421], "digits": [2, OMITTABLE]})
    variants = generate([*seeds(), rounded, other_digits, circle, required], Options(methods=("omit",)))
    # "" among the accepted values (BFCL's mark) or the schema's default; never a required argument, never a
    # default that is not the seed's value, never an optional argument that may not be left out.
    assert {(v.seed_id, v.change) for v in variants} == {
        ("area", "geometry.area_circle.units: units → omitted"), ("round", "math.round.digits: 2 → omitted")}
    for variant in variants:
        assert "radius" in reference_answer(variant.task)["tool_calls"][0]["arguments"] or variant.seed_id == "round"
        assert set(reference_answer(variant.task)["tool_calls"][0]["arguments"]) & {"units", "digits"} == set()
        for verifier in (VERIFIER, get_verifier("bfcl")):
            [item] = screen([variant], verifier=verifier)
            assert item.accepted, (verifier.name, item.rejection)


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


def test_counts_name_every_filter_that_applied_and_add_up():
    heldout = [task("held", "Calculate the factorial of 7 using math functions!", FACTORIAL, {"number": [7]})]
    items = screen(generate(seeds(), Options()), verifier=VERIFIER, train=seeds(), heldout=heldout)
    report = counts(items)
    assert set(report["rejected"]) == set(FILTERS) - {"environment"}
    assert report["environment"] == {"name": "", "applied": False, "skipped": "no environment is named"}
    assert report["generated"] == len(items) == report["accepted"] + sum(report["rejected"].values())
    assert report["rejected"]["heldout_near_duplicate"] >= 1
    assert report["accepted"] == sum(report["accepted_by_method"].values())


# --- the environment filter ----------------------------------------------------------------


@pytest.fixture(scope="module")
def workbench() -> WorkbenchEnvironment:
    return WorkbenchEnvironment(load_data(EXTERNAL / "workbench"))


def workplace(id_: str, request: str, *calls: ExpectedCall) -> Task:
    tools = tools_by_domain(EXTERNAL / "nemo_gym" / "workplace_assistant" / "example.jsonl")
    return Task(id=id_, messages=[{"role": "user", "content": request}], tools=[*tools["calendar"], *tools["email"]],
                expected_calls=list(calls))  # fmt: skip


DELETE_EVENT = "calendar_delete_event"
EVENT = "00000013"  # the first row of WorkBench's calendar_events.csv


def test_workbench_variants_whose_calls_fail_in_the_sandbox_are_rejected_with_the_reason(workbench):
    playing = EnvironmentFilter.of("workbench", workbench)
    assert playing.applies and workbench.cannot_judge_variants() == ""
    works = workplace("works", f"Delete event {EVENT}.", ExpectedCall.exact(DELETE_EVENT, {"event_id": EVENT}))
    missing = workplace("missing", "Delete event 99999999.", ExpectedCall.exact(DELETE_EVENT, {"event_id": "99999999"}))
    bad_date = workplace("bad-date", "Book a sync on the 31st of November.", ExpectedCall.exact(
        "calendar_create_event", {"event_name": "sync", "participant_email": "luis.ortiz@atlas.com",
                                  "event_start": "2023-11-31 10:00:00", "duration": "30"}))  # fmt: skip
    items = screen([variant(works), variant(missing), variant(bad_date)], verifier=VERIFIER, environment=playing)
    assert rejections(items) == [None, "environment", "environment"]
    assert items[1].rejection.reason == f"call 1, {DELETE_EVENT}, fails in workbench: Event not found."
    assert items[2].rejection.reason == ("call 1, calendar_create_event, fails in workbench: Invalid event_start "
                                         "format. Expected YYYY-MM-DD HH:MM:SS.")  # fmt: skip
    report = counts(items, playing)
    assert report["rejected"]["environment"] == 2 and report["accepted"] == 1
    assert report["environment"] == {"name": "workbench", "applied": True, "skipped": ""}
    # Without the environment the same variants pass: only playing them finds the missing row.
    assert rejections(screen([variant(missing), variant(bad_date)], verifier=VERIFIER)) == [None, None]


def test_a_call_unsafe_under_the_environments_policy_is_rejected_by_the_environment_filter():
    outside = SafetyPolicy(recipient_rules=[RecipientRule("internal-mail", ["email_send_email"], ["recipient"],
                                                          ["atlas.com"])])  # fmt: skip
    sandbox = WorkbenchEnvironment(load_data(EXTERNAL / "workbench"), policy=outside)
    send = workplace("send", "Mail eve@evil.example saying hi.", ExpectedCall.exact(
        "email_send_email", {"recipient": "eve@evil.example", "subject": "hi", "body": "hi"}))  # fmt: skip
    [item] = screen([variant(send)], verifier=VERIFIER, environment=EnvironmentFilter.of("workbench", sandbox))
    assert item.rejection.filter == "environment" and item.rejection.reason.startswith("unsafe under the safety")
    assert "internal-mail" in item.rejection.reason


def test_the_environment_filter_names_the_first_refused_call_of_several(workbench):
    playing = EnvironmentFilter.of("workbench", workbench)
    calls = [ExpectedCall.exact(DELETE_EVENT, {"event_id": event}) for event in (EVENT, "99999999", "99999998")]
    rejection = environment_rejection(workplace("several", "Delete three events.", *calls), playing)
    assert rejection.filter == "environment"
    assert rejection.reason == f"call 2, {DELETE_EVENT}, fails in workbench: Event not found."


class EndStateUnreached(Environment):
    """Runs every call cleanly, and judges the episode failed: a team environment whose end state is not reached."""

    name = "unreached"

    def reset(self, task: Task) -> None:
        self.task = task

    def step(self, call: ToolCall) -> StepResult:
        return StepResult(observation="ok", done=False)

    def judge(self) -> Judgement:
        return Judgement.of_execution(self.task.id, succeeded=False, unsafe=[], reason="order 7 is still open",
                                      turns=1)  # fmt: skip


class Broken(EndStateUnreached):
    def step(self, call: ToolCall) -> StepResult:
        raise TimeoutError("environment step timed out after 30 s")


class Refusing(EndStateUnreached):
    def step(self, call: ToolCall) -> StepResult:
        return StepResult(observation="no " * 100, done=False, ok=False)


def test_a_refused_calls_observation_is_shown_cut_to_200_characters():
    fact = task("fact", "Factorial of 5.", FACTORIAL, {"number": [5]})
    rejection = environment_rejection(fact, EnvironmentFilter.of("shop", Refusing()))
    assert rejection.reason == "call 1, math.factorial, fails in shop: " + ("no " * 100)[:200]


def test_an_end_state_not_reached_or_a_broken_environment_rejects_the_variant_alone():
    fact = variant(task("fact", "Factorial of 5.", FACTORIAL, {"number": [5]}))
    [unreached] = screen([fact], verifier=VERIFIER, environment=EnvironmentFilter.of("shop", EndStateUnreached()))
    assert unreached.rejection.reason == "the expected calls do not pass in shop: order 7 is still open"
    [broken] = screen([fact], verifier=VERIFIER, environment=EnvironmentFilter.of("shop", Broken()))
    assert broken.rejection.reason == "shop failed: TimeoutError: environment step timed out after 30 s"


@pytest.mark.parametrize("name", ["single_step", "replay"])
def test_an_environment_that_cannot_judge_variants_says_so_and_the_report_says_the_filter_did_not_apply(name):
    environment = make_environment(name)
    playing = EnvironmentFilter.of(name, environment)
    assert not playing.applies and playing.skipped.startswith(f"{name} cannot judge variants: ")
    assert environment.cannot_judge_variants() in playing.skipped
    missing = variant(workplace("missing", "Delete event 99999999.",
                                ExpectedCall.exact(DELETE_EVENT, {"event_id": "99999999"})))  # fmt: skip
    items = screen([missing], verifier=VERIFIER, environment=playing)
    report = counts(items, playing)
    assert rejections(items) == [None] and "environment" not in report["rejected"]
    assert report["environment"] == {"name": name, "applied": False, "skipped": playing.skipped}
    assert NO_ENVIRONMENT.report()["applied"] is False
