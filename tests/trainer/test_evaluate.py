from __future__ import annotations

import json

import pytest

from tests.conftest import REPO_ROOT
from tests.trainer.tiny_model import tiny_tasks
from trainer.contracts import ExpectedCall, Task, TaskMetadata
from trainer.evaluate import Evaluation, Prices, evaluate_tasks, judge, metrics_report, summarize
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
        def execute(self, task, calls):
            return any(call.arguments.get("city", "").lower() == "paris" for call in calls)

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


def test_only_an_environment_with_an_end_state_can_measure_execution_success():
    with pytest.raises(ValueError, match="environment must be one of workbench"):
        EvalConfig(environment="single_step")
