"""The replay environment: a real tau-bench failure's recorded results answer matching calls; ground truth judges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.environments.conftest import EXTERNAL
from tests.trainer.test_eval_job import run_in_process
from tests.trainer.tiny_model import REPO_ROOT, write_spec
from trainer.contracts import ContractError, EpisodeSetup, ExpectedCall, Task, ToolCall
from trainer.environments import make_environment
from trainer.environments.replay import ReplayEnvironment, answerable_calls
from trainer.episodes import run_episodes
from trainer.evaluate import Evaluation, evaluate_tasks
from trainer.prompts import format_tool_calls
from trainer.rollout import Generation
from trainer.spec.environments import EXECUTING_ENVIRONMENTS, EpisodeBudget, check_executing_environment
from trainer.spec.eval import SamplingConfig
from trainer.verifiers import SafetyPolicy, get_verifier

TAU_AIRLINE = EXTERNAL / "tau_bench" / "gpt-4o-airline.json"
FIRST_CALL = 6  # the conversation's first tool call: the episode starts after the user gave their id


@pytest.fixture(scope="module")
def failure() -> dict:
    """tau-bench airline task 19, trial 0 (reward 0): the agent changed the flights to HAT212 on 05-20, not HAT033
    on 05-19, and booked the bag as free."""
    records = json.loads(TAU_AIRLINE.read_text(encoding="utf-8"))
    return next(r for r in records if (r["task_id"], r["trial"]) == (19, 0) and r["reward"] == 0)


def episode_task(record: dict, start: int, environment: str | None = "replay") -> Task:
    """The episode task a conversion makes: the chat before `start`, the calls after it with their recorded
    results, and the ground-truth actions as the expected calls, in order."""
    trajectory = record["traj"]
    results = {message["tool_call_id"]: message["content"] for message in trajectory if message["role"] == "tool"}
    recorded = [
        {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"]),
         "result": results[call["id"]]}
        for message in trajectory[start:] if message["role"] == "assistant" for call in message.get("tool_calls") or []
    ]  # fmt: skip
    actions = record["info"]["task"]["actions"]
    names = sorted({entry["name"] for entry in recorded} | {action["name"] for action in actions})
    return Task.from_json({
        "id": f"tau-airline-{record['task_id']}-{record['trial']}",
        "messages": trajectory[:start],
        "tools": [{"name": name, "parameters": {"type": "object", "properties": {}}} for name in names],
        "expected_calls": [{"name": a["name"], "arguments": {k: [v] for k, v in a["kwargs"].items()}} for a in actions],
        "order_sensitive": True,
        "episode": {"environment": environment, "start_state": {"recorded": recorded}},
    })  # fmt: skip


@pytest.fixture(scope="module")
def tau_task(failure) -> Task:
    return episode_task(failure, FIRST_CALL)


def production_calls(task: Task) -> list[ToolCall]:
    return [ToolCall(entry["name"], entry["arguments"]) for entry in task.episode.start_state["recorded"]]


def ground_truth_calls(task: Task) -> list[ToolCall]:
    return [ToolCall(call.name, {key: values[0] for key, values in call.arguments.items()})
            for call in task.expected_calls]  # fmt: skip


def test_the_recording_holds_the_production_calls_after_the_start(failure, tau_task):
    assert [call.name for call in production_calls(tau_task)] == [
        "get_reservation_details", "search_direct_flight", "search_direct_flight", "update_reservation_flights",
        "update_reservation_baggages",
    ]  # fmt: skip
    assert tau_task.messages[-1] == {"role": "user", "content": "My user ID is raj_brown_5782."}


def test_a_recorded_call_observes_its_recorded_result(failure, tau_task):
    environment = ReplayEnvironment()
    environment.reset(tau_task)
    looked_up = environment.step(ToolCall("get_reservation_details", {"reservation_id": "VA5SGQ"}))
    assert looked_up.ok and not looked_up.done and looked_up.observation == failure["traj"][FIRST_CALL + 1]["content"]
    # Compared as JSON: another key order and 1.0 for 1 are the same call.
    bag = {"payment_id": "credit_card_8003957", "nonfree_baggages": 0.0, "total_baggages": 1,
           "reservation_id": "VA5SGQ"}  # fmt: skip
    assert environment.step(ToolCall("update_reservation_baggages", bag)).ok


def test_a_call_the_recording_lacks_observes_an_error_and_is_still_judged(tau_task):
    environment = ReplayEnvironment()
    environment.reset(tau_task)
    right_flights = ground_truth_calls(tau_task)[1]
    missed = environment.step(right_flights)
    assert not missed.ok and missed.observation == {
        "error": "the replay has no recorded result for this call: the recorded calls to update_reservation_flights "
                 "had other arguments"}  # fmt: skip
    unknown = environment.step(ToolCall("cancel_reservation", {"reservation_id": "VA5SGQ"}))
    assert "the recording holds no call to cancel_reservation" in unknown.observation["error"]
    assert environment.judge().turns == 2


def test_replaying_the_failing_production_calls_fails_on_the_first_expected_call_they_miss(tau_task):
    judgement = ReplayEnvironment().run_calls(tau_task, production_calls(tau_task))
    assert (judgement.passed, judgement.reward, judgement.execution_success) == (False, 0.0, False)
    assert judgement.components == {"execution_success": 0.0, "unsafe": 0.0}
    assert judgement.reason.startswith(
        "expected call 2 of 3, update_reservation_flights, was not made (the last update_reservation_flights call: "
        "argument flights is [{'flight_number': 'HAT169', 'date': ..., "
        "expected [{'flight_number': 'HAT169', 'date': ...)"
    )
    assert judgement.reason.endswith("; and 1 more; 5 of 5 call(s) answered from the recording")


def test_the_ground_truth_passes_even_where_the_recording_cannot_answer_it(tau_task):
    judgement = ReplayEnvironment().run_calls(tau_task, ground_truth_calls(tau_task))
    assert (judgement.passed, judgement.reward, judgement.execution_success) == (True, 1.0, True)
    assert judgement.reason == "all 3 expected call(s) made in order; 1 of 3 call(s) answered from the recording"


def test_the_app_can_say_which_expected_calls_the_replay_answers(tau_task):
    answers = answerable_calls(tau_task)
    assert [answer.answerable for answer in answers] == [True, False, False]
    assert answers[0].recorded.result.startswith('{"reservation_id": "VA5SGQ"')


def small_task(*expected: ExpectedCall, recorded=(), order_sensitive=False, **episode) -> Task:
    tools = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
             for name in ("lookup", "refund", "delete_rows", "confirm")]  # fmt: skip
    return Task(id="small", messages=[{"role": "user", "content": "Refund order 7."}], tools=tools,
                expected_calls=list(expected), no_call_expected=not expected and "expected_state" not in episode,
                order_sensitive=order_sensitive,
                episode=EpisodeSetup("replay", {"recorded": list(recorded)}, **episode))  # fmt: skip


LOOKUP = ExpectedCall.exact("lookup", {"order": 7})
REFUND = ExpectedCall("refund", {"order": [7], "reason": ["damaged", ""]})  # the reason may be left out


@pytest.mark.parametrize(
    ("order_sensitive", "calls", "passed"),
    [
        (True, [ToolCall("lookup", {"order": 7}), ToolCall("refund", {"order": 7})], True),
        (True, [ToolCall("refund", {"order": "7", "reason": "damaged"}), ToolCall("lookup", {"order": 7})], False),
        (False, [ToolCall("refund", {"order": "7", "reason": "damaged"}), ToolCall("lookup", {"order": 7})], True),
        (False, [ToolCall("lookup", {"order": 7}), ToolCall("lookup", {"order": 8}), ToolCall("refund", {"order": 7})],
         True),  # extra calls are allowed
        (False, [ToolCall("lookup", {"order": 7}), ToolCall("refund", {"order": 7, "reason": "late"})], False),
    ],
)
def test_expected_calls_match_as_the_tool_call_verifier_matches_them(order_sensitive, calls, passed):
    judgement = ReplayEnvironment().run_calls(small_task(LOOKUP, REFUND, order_sensitive=order_sensitive), calls)
    assert judgement.passed is passed and judgement.execution_success is passed


def test_an_out_of_order_call_is_named_as_such():
    calls = [ToolCall("refund", {"order": 7}), ToolCall("lookup", {"order": 7})]
    judgement = ReplayEnvironment().run_calls(small_task(LOOKUP, REFUND, order_sensitive=True), calls)
    assert judgement.reason.startswith("expected call 2 of 2, refund, was not made after the expected calls before it")


def test_one_call_cannot_stand_for_two_expected_calls():
    twice = small_task(LOOKUP, LOOKUP)
    assert not ReplayEnvironment().run_calls(twice, [ToolCall("lookup", {"order": 7})]).passed
    assert ReplayEnvironment().run_calls(twice, [ToolCall("lookup", {"order": 7})] * 2).passed
    # Either order fits the first expected call, only 7 the second: the pairing gives 8 to the first.
    either = small_task(ExpectedCall("lookup", {"order": [7, 8]}), LOOKUP)
    calls = [ToolCall("lookup", {"order": 7}), ToolCall("lookup", {"order": 8})]
    assert ReplayEnvironment().run_calls(either, calls).passed


def test_an_unsafe_call_fails_the_episode_with_the_rule_broken():
    calls = [ToolCall("lookup", {"order": 7}), ToolCall("delete_rows", {}), ToolCall("refund", {"order": 7})]
    judgement = ReplayEnvironment(SafetyPolicy.default()).run_calls(small_task(LOOKUP, REFUND), calls)
    assert (judgement.passed, judgement.execution_success, judgement.reward) == (False, True, 0.0)
    assert judgement.components == {"execution_success": 1.0, "unsafe": -1.0}
    assert judgement.unsafe == ["delete-without-filter"]
    assert "unsafe: rule delete-without-filter (call 2, delete_rows)" in judgement.reason


def test_a_call_made_again_observes_the_next_recorded_result_then_the_last():
    recorded = [{"name": "lookup", "arguments": {"order": 7}, "result": {"status": "shipped"}},
                {"name": "lookup", "arguments": {"order": 7}, "result": {"status": "delivered"}}]  # fmt: skip
    environment = ReplayEnvironment()
    environment.reset(small_task(LOOKUP, recorded=recorded))
    seen = [environment.step(ToolCall("lookup", {"order": 7})).observation for _ in range(3)]
    assert seen == [{"status": "shipped"}, {"status": "delivered"}, {"status": "delivered"}]


def test_a_task_that_expects_no_call_passes_only_without_one():
    assert ReplayEnvironment().run_calls(small_task(), []).passed
    judgement = ReplayEnvironment().run_calls(small_task(), [ToolCall("lookup", {"order": 7})])
    assert not judgement.passed and judgement.reason.startswith("no call was expected, got lookup")


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (Task(id="bare", messages=[], tools=[], expected_calls=[LOOKUP]), "replay needs episode.start_state.recorded"),
        (small_task(LOOKUP, recorded=[{"arguments": {}}]), "recorded call 1 needs a 'name'"),
        (small_task(LOOKUP, recorded=[{"name": "lookup", "arguments": [7]}]), "'arguments' must be an object"),
        (small_task(expected_state={"orders": {}}), "replay judges by the expected calls, and the task has none"),
    ],
)
def test_a_task_the_replay_cannot_play_fails_its_episode_with_the_reason(task, message):
    with pytest.raises(ContractError, match=message):
        ReplayEnvironment().reset(task)
    [episode] = run_episodes([task], ReplayEnvironment, lambda live: [], EpisodeBudget())
    assert episode.ended == "error" and message in episode.judgement.reason


def test_replay_is_registered_and_a_job_may_name_it():
    policy = SafetyPolicy(name="strict")
    environment = make_environment("replay", policy=policy)
    assert isinstance(environment, ReplayEnvironment) and environment.policy is policy
    assert "replay" in EXECUTING_ENVIRONMENTS
    check_executing_environment("replay")


def test_the_replay_module_loads_no_torch():
    code = "import sys, trainer.environments.replay; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


class ProductionAgent:
    """Makes the production trajectory's calls again, one a turn, then answers: what the failing agent did."""

    name = "scripted"

    def __init__(self, calls: list[ToolCall]) -> None:
        self.calls = calls

    def generate(self, prompts, sampling, hooks=None):
        answers = []
        for prompt in prompts:
            made = sum(1 for message in json.loads(prompt)[FIRST_CALL:] if message["role"] == "tool")
            text = format_tool_calls([self.calls[made]]) if made < len(self.calls) else "Your reservation is updated."
            answers.append([Generation(text=text, prompt_tokens=80, completion_tokens=12, finished=True,
                                       latency_s=0.2)])  # fmt: skip
        return answers


def test_a_tau_bench_failure_evaluates_as_an_episode_in_the_replay_its_task_names(failure, tau_task):
    run = Evaluation(backend=ProductionAgent(production_calls(tau_task)), render=lambda task: json.dumps(task.messages),
                     verifier=get_verifier("binary"), policy=SafetyPolicy.default())  # no job environment
    [result] = evaluate_tasks([tau_task], run, SamplingConfig(), budget=EpisodeBudget(max_turns=8))
    assert (result.ended, result.turns, result.execution_success, result.verifier_pass) == ("answered", 6, False,
                                                                                            False)  # fmt: skip
    recorded_results = [message["content"] for message in failure["traj"][FIRST_CALL:] if message["role"] == "tool"]
    assert [message["content"] for message in result.episode if message["role"] == "tool"] == recorded_results
    assert "expected call 2 of 3, update_reservation_flights, was not made" in result.verdict["reason"]


def test_an_eval_job_plays_the_tau_bench_episode_in_the_replay_on_the_tiny_model(failure, tmp_path, capfd):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(episode_task(failure, FIRST_CALL).to_json_line() + "\n")
    spec = write_spec(tmp_path / "run.json", task_paths=[str(tasks)],
                      hyperparameters={"max_turns": 2, "max_new_tokens": 8})  # no environment: the task names it
    code, events = run_in_process(spec, capfd)
    assert code == 0, events[-1]
    assert events[-1]["metrics"]["execution_success_rate"]["n"] == 1
    results = [json.loads(line) for line in Path(events[-1]["results"]).read_text().splitlines()]
    assert results[0]["ended"] in {"answered", "turn_budget", "unreadable"} and results[0]["turns"] >= 1
