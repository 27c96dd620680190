from __future__ import annotations

import dataclasses
import json
import re
from types import SimpleNamespace

import pytest

from tests.conftest import REPO_ROOT
from tests.trainer.tiny_model import tiny_tasks
from trainer.contracts import ExpectedCall, Task, TaskMetadata, ToolCall
from trainer.evaluate import Evaluation, Prices, evaluate_tasks, judge, metrics_report, summarize
from trainer.parsing import parse_tool_calls
from trainer.prompts import format_tool_calls
from trainer.rollout import Generation
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.eval import EvalConfig, SamplingConfig
from trainer.spec.tasks import load_tasks, seeded_sample, snapshot_sha256
from trainer.verifiers import SafetyPolicy, get_verifier

POLICY = SafetyPolicy.default()
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
DELETE = {
    "type": "function",
    "function": {
        "name": "delete_event",
        "parameters": {"type": "object", "properties": {"event_id": {"type": "string"}}},
    },
}


def task(task_id="t1", bucket=None, source=None, tools=None, expected=None, no_call=False):
    return Task(
        id=task_id,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=tools or [WEATHER],
        expected_calls=[] if no_call else [expected or ExpectedCall.exact("get_weather", {"city": "Paris"})],
        no_call_expected=no_call,
        metadata=TaskMetadata(source=source, bucket=bucket),
    )


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


def test_a_right_call_is_valid_and_correct_in_tool_and_arguments():
    judged = judge(task(), call("get_weather", city="Paris"), POLICY)
    assert (judged.valid_json, judged.correct_tool, judged.correct_arguments) == (True, True, True)
    assert judged.violations == []


def test_a_call_with_a_wrong_argument_has_the_right_tool_only():
    judged = judge(task(), call("get_weather", city="Rome"), POLICY)
    assert (judged.valid_json, judged.correct_tool, judged.correct_arguments) == (True, True, False)


def test_a_wrong_tool_or_an_extra_call_is_not_the_correct_tool():
    assert not judge(task(), call("get_time", city="Paris"), POLICY).correct_tool
    both = call("get_weather", city="Paris") + "\n" + call("get_weather", city="Rome")
    assert not judge(task(), both, POLICY).correct_tool


# Valid JSON: the calls are written as JSON and every call block is well-formed; parseable: any call the
# parser (and so the verifiers) can read, JSON or Python syntax.


def test_a_plain_json_call_is_valid_json_and_parseable():
    judged = judge(task(), call("get_weather", city="Paris"), POLICY)
    assert (judged.valid_json, judged.parseable, judged.correct_arguments) == (True, True, True)


def test_a_fenced_call_is_valid_json_only_when_the_fence_holds_json():
    fenced_json = judge(task(), "```json\n" + call("get_weather", city="Paris") + "\n```", POLICY)
    assert (fenced_json.valid_json, fenced_json.parseable, fenced_json.correct_arguments) == (True, True, True)
    fenced_python = judge(task(), '```python\nget_weather(city="Paris")\n```', POLICY)
    assert (fenced_python.valid_json, fenced_python.parseable, fenced_python.correct_arguments) == (False, True, True)


def test_a_python_syntax_call_is_parseable_and_correct_but_not_valid_json():
    judged = judge(task(), 'get_weather(city="Paris")', POLICY)
    assert (judged.valid_json, judged.parseable, judged.correct_arguments) == (False, True, True)
    assert judged.calls is not None and judged.calls[0].arguments == {"city": "Paris"}


def test_one_malformed_call_among_several_makes_the_answer_invalid_json():
    cut = call("get_weather", city="Rome")[:-3]
    lines = judge(task(), call("get_weather", city="Paris") + "\n" + cut, POLICY)
    assert (lines.valid_json, lines.parseable) == (False, True)  # the readable call is still judged
    tags = judge(task(), f"<tool_call>{call('get_weather', city='Paris')}</tool_call>\n<tool_call>{cut}</tool_call>",
                 POLICY)
    assert (tags.valid_json, tags.parseable, tags.correct_tool) == (False, False, False)


def test_the_summary_reports_the_parseable_rate_beside_the_valid_json_rate():
    answers = [call("get_weather", city="Paris"), 'get_weather(city="Rome")', "no idea", call("get_weather", city="x")]
    summary = summarize(evaluate_tasks(FOUR_TASKS, evaluation(answers), SamplingConfig()), resamples=200)
    assert (summary["valid_json_rate"]["value"], summary["parseable_rate"]["value"]) == (0.5, 0.75)


def test_prose_is_not_valid_json():
    judged = judge(task(), "The weather in Paris is sunny.", POLICY)
    assert (judged.valid_json, judged.correct_tool, judged.calls) == (False, False, None)
    assert judged.parse_error


def test_for_a_no_call_task_a_plain_answer_is_valid_and_correct_and_a_call_is_not():
    abstained = judge(task(no_call=True), "I cannot help with that.", POLICY)
    assert (abstained.valid_json, abstained.correct_tool, abstained.correct_arguments) == (True, True, True)
    called = judge(task(no_call=True), call("get_weather", city="Paris"), POLICY)
    assert (called.valid_json, called.correct_arguments) == (True, False)


def test_a_destructive_call_without_a_filter_is_an_unsafe_action():
    delete_task = task(tools=[DELETE], expected=ExpectedCall.exact("delete_event", {"event_id": "1"}))
    assert judge(delete_task, call("delete_event"), POLICY).violations == ["delete-without-filter"]
    assert judge(delete_task, call("delete_event", event_id="1"), POLICY).violations == []


class ScriptedBackend:
    """Answers each prompt with the next scripted text."""

    name = "scripted"

    def __init__(self, answers):
        self.answers = answers

    def generate(self, prompts, sampling, hooks=None):
        return [
            [
                Generation(
                    text=self.answers[i],
                    prompt_tokens=100,
                    completion_tokens=20,
                    finished=True,
                    latency_s=0.1 * (i + 1),
                )
            ]
            for i in range(len(prompts))
        ]


def evaluation(answers, environment=None, prices=None):
    return Evaluation(
        backend=ScriptedBackend(answers),
        render=lambda t: t.id,
        verifier=get_verifier("binary"),
        policy=POLICY,
        prices=prices or Prices(),
        environment=environment,
    )


FOUR_TASKS = [
    task("a", bucket="wrong_tool", source="s1"),
    task("b", bucket="wrong_tool", source="s1"),
    task("c", bucket="wrong_arguments", source="s2"),
    task("d", source="s2"),
]
FOUR_ANSWERS = [
    call("get_weather", city="Paris"),
    call("get_weather", city="Rome"),
    "no idea",
    call("get_weather", city="paris"),
]


def test_results_come_back_per_task_in_order_with_tokens_latency_and_cost():
    results = evaluate_tasks(FOUR_TASKS, evaluation(FOUR_ANSWERS, prices=Prices(1.0, 2.0)), SamplingConfig())
    assert [result.task_id for result in results] == ["a", "b", "c", "d"]
    assert [result.verifier_pass for result in results] == [True, False, False, True]
    assert results[0].calls == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert results[2].calls is None and results[2].parse_error
    assert results[0].cost == pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6)
    assert results[3].latency_s == pytest.approx(0.4)
    assert results[1].verdict["reason"]


def test_the_summary_reports_every_rate_with_an_interval_and_the_latency_percentiles():
    summary = summarize(evaluate_tasks(FOUR_TASKS, evaluation(FOUR_ANSWERS), SamplingConfig()), resamples=200)
    assert summary["tasks"] == 4
    assert summary["valid_json_rate"]["value"] == 0.75
    assert summary["correct_tool_rate"]["value"] == 0.75
    assert summary["correct_arguments_rate"]["value"] == 0.5
    assert summary["unsafe_action_rate"]["value"] == 0.0
    assert summary["verifier_pass_rate"]["value"] == 0.5
    for name in ("valid_json_rate", "correct_tool_rate", "correct_arguments_rate", "verifier_pass_rate"):
        entry = summary[name]
        assert entry["low"] <= entry["value"] <= entry["high"] and entry["n"] == 4
    assert summary["latency_p50_s"] == pytest.approx(0.25)
    assert summary["latency_p95_s"] == pytest.approx(0.385)
    assert summary["prompt_tokens_per_task"] == 100 and summary["completion_tokens_per_task"] == 20


def test_execution_success_is_not_applicable_without_an_environment():
    summary = summarize(evaluate_tasks(FOUR_TASKS, evaluation(FOUR_ANSWERS), SamplingConfig()))
    assert summary["execution_success_rate"]["value"] is None
    assert summary["execution_success_rate"]["n"] == 0
    assert "no environment" in summary["execution_success_rate"]["note"]


def test_execution_success_comes_from_the_environment_when_there_is_one():
    class CityEnvironment:
        def run_output(self, task, output):
            calls = parse_tool_calls(output).calls or []
            return SimpleNamespace(execution_success=any(c.arguments.get("city", "").lower() == "paris" for c in calls))

    results = evaluate_tasks(FOUR_TASKS, evaluation(FOUR_ANSWERS, CityEnvironment()), SamplingConfig())
    assert [result.execution_success for result in results] == [True, False, False, True]
    assert summarize(results)["execution_success_rate"]["value"] == 0.5


def test_the_report_breaks_metrics_down_by_bucket_and_source_and_recommends_a_method():
    report = metrics_report(evaluate_tasks(FOUR_TASKS, evaluation(FOUR_ANSWERS), SamplingConfig()), resamples=100)
    assert set(report["by_bucket"]) == {"wrong_tool", "wrong_arguments", "(none)"}
    assert report["by_bucket"]["wrong_tool"]["correct_arguments_rate"]["value"] == 0.5
    assert report["by_source"]["s2"]["tasks"] == 2
    # Sometimes right (GRPO), and one answer in four is not a valid call: a prompt change first.
    assert [option["method"] for option in report["recommendation"]["options"]] == ["prompt", "grpo"]
    assert report["recommendation"]["reason"].startswith("25% of the outputs are not valid calls")


def test_a_seeded_sample_is_reproducible_and_keeps_file_order():
    tasks = [task(f"t{i}") for i in range(50)]
    sample = seeded_sample(tasks, 10, seed=0)
    assert sample == seeded_sample(tasks, 10, seed=0)
    assert sample != seeded_sample(tasks, 10, seed=1)
    assert [t.id for t in sample] == [t.id for t in tasks if t in sample]
    assert seeded_sample(tasks, None, seed=0) == tasks and seeded_sample(tasks, 99, seed=0) == tasks


def test_task_files_are_loaded_and_a_bad_line_names_its_place(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text("".join(t.to_json_line() + "\n" for t in tiny_tasks()))
    assert [t.id for t in load_tasks([str(good)])] == [t.id for t in tiny_tasks()]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(tiny_tasks()[0].to_json_line() + "\n{oops\n")
    with pytest.raises(SpecError, match=r"bad.jsonl:2: invalid JSON"):
        load_tasks([str(bad)])


def test_a_missing_task_file_and_an_empty_snapshot_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="task file not found"):
        load_tasks([str(tmp_path / "absent.jsonl")])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(SpecError, match="the task snapshot is empty"):
        load_tasks([str(empty)])


def test_the_snapshot_hash_follows_the_content(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("x\n")
    second.write_text("x\n")
    assert snapshot_sha256([str(first)]) == snapshot_sha256([str(second)])
    second.write_text("y\n")
    assert snapshot_sha256([str(first)]) != snapshot_sha256([str(second)])


def test_the_eval_config_refuses_an_unknown_verifier_backend_or_token_limit():
    with pytest.raises(SpecError, match="unknown verifier 'exact'"):
        config_from_json(EvalConfig, {"verifier": "exact"}, "eval hyperparameters")
    with pytest.raises(SpecError, match="unknown backend 'tpu'"):
        config_from_json(EvalConfig, {"backend": "tpu"}, "eval hyperparameters")
    with pytest.raises(SpecError, match="at least 1"):
        config_from_json(EvalConfig, {"max_new_tokens": 0}, "eval hyperparameters")
    assert EvalConfig(batch_size=4).sampling(seed=9) == SamplingConfig(batch_size=4, seed=9)


def test_json_that_holds_no_call_is_not_a_valid_call():
    judged = judge(task(), '{"tool_calls": []}', POLICY)
    assert (judged.valid_json, judged.correct_tool) == (False, False)


def test_the_workbench_sandbox_gives_execution_success_in_an_eval():
    from flywheel.datasets.importers import read
    from trainer.evaluate import execution_environment

    csv = REPO_ROOT.parent / "shared" / "external" / "workbench" / "processed" / "queries_and_answers"
    tasks = [candidate.task for candidate in read(csv / "calendar_queries_and_answers.csv", "workbench")][:2]
    truth = tasks[0].expected_calls[0]
    right = json.dumps({"name": truth.name, "arguments": {key: values[0] for key, values in truth.arguments.items()}})
    sandbox = execution_environment("workbench", POLICY)
    results = evaluate_tasks(tasks, evaluation([right, "no idea"], sandbox), SamplingConfig())
    assert [result.execution_success for result in results] == [True, False]


def test_an_unreadable_answer_never_succeeds_even_where_the_expected_state_is_unchanged():
    from flywheel.datasets.importers import read
    from trainer.evaluate import execution_environment

    csv = REPO_ROOT.parent / "shared" / "external" / "workbench" / "processed" / "queries_and_answers"
    unchanged = dataclasses.replace(next(read(csv / "calendar_queries_and_answers.csv", "workbench")).task,
                                    expected_calls=[], no_call_expected=True)
    cut = '{"name": "calendar.create_event", "arguments": {"event_name": "Sync'  # a call cut by the token limit
    sandbox = execution_environment("workbench", POLICY)
    results = evaluate_tasks([unchanged, unchanged], evaluation([cut, "Nothing to do."], sandbox), SamplingConfig())
    assert [result.execution_success for result in results] == [False, True]


def test_only_an_environment_with_an_end_state_can_measure_execution_success():
    with pytest.raises(ValueError, match="environment must be one of workbench"):
        EvalConfig(environment="single_step")


def test_a_rate_of_zero_gets_a_wilson_interval_not_a_zero_wide_one():
    results = evaluate_tasks(FOUR_TASKS, evaluation(["no idea"] * 4), SamplingConfig())
    entry = summarize(results)["correct_arguments_rate"]
    assert (entry["value"], entry["low"], entry["n"]) == (0.0, 0.0, 4)
    assert entry["high"] == pytest.approx(0.4899, abs=1e-4)  # Wilson 95% for 0 of 4


class CalendarAgent:
    """A scripted agent that reads the conversation: it searches the day, then deletes the earliest event it saw."""

    name = "scripted"

    def generate(self, prompts, sampling, hooks=None):
        return [[self._answer(json.loads(prompt))] for prompt in prompts]

    def _answer(self, messages):
        last = messages[-1]
        if last["role"] == "user":
            text = ('<tool_call>{"name": "calendar_search_events", "arguments": {"time_min": "2023-12-13 00:00:00",'
                    ' "time_max": "2023-12-13 23:59:59"}}</tool_call>')
        elif messages[-2]["tool_calls"][0]["function"]["name"] == "calendar_search_events":
            first = min(json.loads(last["content"])["events"], key=lambda event: event["event_start"])
            text = f'<tool_call>{{"name": "calendar_delete_event", "arguments": {{"event_id": "{first["event_id"]}"}}}}'
            text += "</tool_call>"
        else:
            text = "Your first meeting on December 13 is cancelled."
        return Generation(text=text, prompt_tokens=100, completion_tokens=20, finished=True, latency_s=1.0)


def test_an_episode_eval_reads_the_lookup_and_reaches_the_workbench_end_state():
    from flywheel.datasets.importers import read
    from trainer.evaluate import evaluate_episodes, execution_environment

    csv = REPO_ROOT.parent / "shared" / "external" / "workbench" / "processed" / "queries_and_answers"
    lookup = next(read(csv / "calendar_queries_and_answers.csv", "workbench")).task  # "Delete my first meeting ..."
    assert lookup.expected_calls[0].arguments["event_id"] == ["00000256"]  # not in the request: only a search finds it
    run = Evaluation(backend=CalendarAgent(), render=lambda t: json.dumps(t.messages), verifier=get_verifier("binary"),
                     policy=POLICY, environment=execution_environment("workbench", POLICY))
    [result] = evaluate_episodes([lookup], run, SamplingConfig(), EvalConfig(environment="workbench", max_turns=4)
                                 .episode_budget())
    assert (result.execution_success, result.verifier_pass, result.turns, result.ended) == (True, True, 3, "answered")
    assert [call["name"] for call in result.calls] == ["calendar_search_events", "calendar_delete_event"]
    assert [message["role"] for message in result.episode] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert (result.completion_tokens, result.prompt_tokens, result.latency_s) == (60, 300, 3.0)
    figures = summarize([result])
    assert (figures["turns_per_episode"], figures["calls_per_episode"], figures["ended"]) == (3, 2, {"answered": 1})
    assert figures["truncation_rate"]["value"] == 0.0

    budget = EvalConfig(environment="workbench", max_turns=2).episode_budget()
    [cut] = evaluate_episodes([lookup], run, SamplingConfig(), budget)
    assert (cut.ended, cut.execution_success, cut.finished) == ("turn_budget", True, False)
    assert summarize([cut])["truncation_rate"]["value"] == 1.0


def test_episodes_need_a_turn_and_may_leave_the_environment_to_the_tasks():
    assert EvalConfig(max_turns=3).episode_budget().max_turns == 3  # each task names its own, or the job fails
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        EvalConfig(max_turns=0, environment="workbench")
    assert EvalConfig(environment="workbench").episode_budget() is None
    assert EvalConfig(environment="workbench", max_turns=3, max_new_tokens=100).episode_budget().max_tokens == 300


# --- Tasks that name their own environment ------------------------------------------------------

ORDERS_ENTRY = "trainer.examples.orders:environment"


def named(task_, environment, start_state=None):
    from trainer.contracts import EpisodeSetup

    return dataclasses.replace(task_, episode=EpisodeSetup(environment, start_state or {}))


def order_tasks():
    from tests.trainer.test_orders_example import TASKS

    return load_tasks([TASKS])


def desk_evaluation(environment=None):
    from tests.trainer.test_orders_example import DeskAgent

    return Evaluation(backend=DeskAgent(), render=lambda t: json.dumps(t.messages), verifier=get_verifier("binary"),
                      policy=POLICY, environment=environment)  # fmt: skip


def recorded(task_):
    """`task_` as a replay task: the desk agent's calls in the order desk and what each observed, recorded."""
    from trainer.environments import make_environment
    from trainer.evaluate import evaluate_episodes
    from trainer.spec.environments import EpisodeBudget

    [played] = evaluate_episodes([task_], desk_evaluation(make_environment(ORDERS_ENTRY)), SamplingConfig(),
                                 EpisodeBudget(max_turns=6))  # fmt: skip
    results = [message["content"] for message in played.episode if message["role"] == "tool"]
    return named(task_, "replay", {"recorded": [{**call, "result": result}
                                               for call, result in zip(played.calls, results, strict=True)]})


@pytest.fixture
def builds(monkeypatch):
    """The names `trainer.evaluate` builds environments for, in order."""
    import trainer.evaluate
    from trainer.environments import make_environment

    built = []

    def counting(name, *args, **kwargs):
        built.append(name)
        return make_environment(name, *args, **kwargs)

    monkeypatch.setattr(trainer.evaluate, "make_environment", counting)
    return built


def test_tasks_play_in_the_environment_each_names_built_once_with_results_in_task_order(builds):
    from trainer.spec.environments import EpisodeBudget

    orders = order_tasks()
    tasks = [recorded(orders[0]), named(orders[1], ORDERS_ENTRY), recorded(orders[2]), named(orders[3], ORDERS_ENTRY)]
    builds.clear()
    results = evaluate_tasks(tasks, desk_evaluation(), SamplingConfig(), budget=EpisodeBudget(max_turns=6))
    assert [result.task_id for result in results] == [task_.id for task_ in tasks]
    assert [result.execution_success for result in results] == [True] * 4, [r.verdict["reason"] for r in results]
    assert builds == ["replay", ORDERS_ENTRY]
    assert "answered from the recording" in results[0].verdict["reason"]  # the replay judged it
    assert results[1].verdict["reason"] == "the orders end as expected"  # the order desk judged it


def test_the_jobs_environment_wins_over_the_one_a_task_names(builds):
    from trainer.environments import make_environment
    from trainer.spec.environments import EpisodeBudget

    run = desk_evaluation(make_environment(ORDERS_ENTRY))
    [result] = evaluate_tasks([named(order_tasks()[0], "replay")], run, SamplingConfig(),
                              budget=EpisodeBudget(max_turns=6))  # fmt: skip
    assert builds == [] and run.task_environments == {}  # nothing built for the task: the job's serves it
    assert result.execution_success and result.verdict["reason"] == "the orders end as expected"


def test_a_single_answer_runs_in_the_environment_its_task_names_and_none_without_one():
    replayed = recorded(order_tasks()[3])  # cancel chloe's only order: one lookup, then the cancel
    calls = [ToolCall(entry["name"], entry["arguments"]) for entry in replayed.episode.start_state["recorded"]]
    lookup_only, whole = format_tool_calls(calls[:1]), format_tool_calls(calls)
    results = evaluate_tasks([replayed, replayed, task("plain")],
                             evaluation([lookup_only, whole, call("get_weather", city="Paris")]), SamplingConfig())
    assert [result.execution_success for result in results] == [False, True, None]


class NeverGenerates:
    name = "scripted"

    def generate(self, prompts, sampling, hooks=None):
        raise AssertionError("nothing may be generated before every environment is built")


@pytest.mark.parametrize("budget", [None, 2])
@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ("trainer.examples.orders:nope", "environment 'trainer.examples.orders:nope' of task t1 cannot be built: "
                                         "environment trainer.examples.orders:nope: trainer.examples.orders has no "
                                         "nope"),
        ("tau", "environment 'tau' of task t1 cannot be built: environment must be one of workbench, replay"),
    ],
)
def test_a_task_naming_an_environment_that_cannot_be_built_fails_before_any_generation(budget, environment, message):
    from trainer.spec.environments import EpisodeBudget

    run = Evaluation(backend=NeverGenerates(), render=lambda t: t.id, verifier=get_verifier("binary"), policy=POLICY)
    tasks = [task("t0"), named(task("t1"), environment), named(task("t2"), environment)]
    with pytest.raises(SpecError, match=re.escape(message)):
        evaluate_tasks(tasks, run, SamplingConfig(), budget=EpisodeBudget(budget) if budget else None)


def test_episodes_with_no_environment_anywhere_fail_before_any_generation():
    from trainer.evaluate import task_environments
    from trainer.spec.environments import EpisodeBudget

    run = Evaluation(backend=NeverGenerates(), render=lambda t: t.id, verifier=get_verifier("binary"), policy=POLICY)
    tasks = [named(task("t0"), "replay", {"recorded": []}), task("t1")]
    with pytest.raises(SpecError, match="episodes need an environment to run their calls in: task t1 names none"):
        evaluate_tasks(tasks, run, SamplingConfig(), budget=EpisodeBudget(2))
    with pytest.raises(SpecError, match="task t1 names none and the job names none"):
        task_environments(tasks, None, POLICY, episodes=True)
    assert task_environments(tasks, "workbench", POLICY, episodes=True) == {}  # the job's serves every task
    assert list(task_environments(tasks, None, POLICY)) == ["replay"]


def test_an_eval_job_whose_task_names_a_broken_environment_stops_before_loading_a_model(tmp_path, capfd):
    from tests.trainer.test_eval_job import run_in_process
    from tests.trainer.tiny_model import write_spec

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(named(order_tasks()[0], "trainer.examples.orders:nope").to_json_line() + "\n")
    spec = write_spec(tmp_path / "run.json", task_paths=[str(tasks)], hyperparameters={"max_turns": 2})
    code, events = run_in_process(spec, capfd)
    assert code != 0 and events[-1]["event"] == "error" and events[-1]["kind"] == "bad_spec"
    assert "environment 'trainer.examples.orders:nope' of task orders-refund-latest-ana" in events[-1]["message"]
    assert not any(e["event"] == "log" and e["message"].startswith("model ready") for e in events)
