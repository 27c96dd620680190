from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from tests.conftest import REPO_ROOT
from tests.trainer.tiny_model import tiny_tasks
from trainer.contracts import ExpectedCall, Task, TaskMetadata
from trainer.evaluate import Evaluation, Prices, evaluate_tasks, judge, metrics_report, summarize
from trainer.parsing import parse_tool_calls
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
    assert report["recommendation"]["method"] == "grpo"


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


def test_episodes_need_an_environment_and_a_turn():
    with pytest.raises(ValueError, match="need an environment"):
        EvalConfig(max_turns=3)
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        EvalConfig(max_turns=0, environment="workbench")
    assert EvalConfig(environment="workbench").episode_budget() is None
    assert EvalConfig(environment="workbench", max_turns=3, max_new_tokens=100).episode_budget().max_tokens == 300
