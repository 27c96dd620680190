"""The single_step environment: its judgement is the task verifier's verdict on the same calls."""

from __future__ import annotations

import pytest

from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.environments.single_step import SingleStepEnvironment
from trainer.verifiers import get_verifier

TASK = Task(
    id="weather-1",
    messages=[{"role": "user", "content": "Weather in Paris and Rome?"}],
    tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    expected_calls=[
        ExpectedCall.exact("get_weather", {"city": "Paris"}),
        ExpectedCall.exact("get_weather", {"city": "Rome"}),
    ],
)
PARIS, ROME = ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})


@pytest.mark.parametrize("verifier", ["tool_call", "binary", "shaped"])
@pytest.mark.parametrize("calls", [[PARIS, ROME], [PARIS], [PARIS, ROME, ROME], []])
def test_the_judgement_equals_the_verifiers_verdict(verifier, calls):
    scorer = get_verifier(verifier)
    judgement = SingleStepEnvironment(scorer).run_calls(TASK, calls)
    expected = scorer.score(TASK, {"tool_calls": [call.to_json() for call in calls]})
    assert judgement.verdict() == expected and judgement.turns == len(calls)


def test_the_episode_is_done_once_it_holds_the_calls_the_task_expects():
    environment = SingleStepEnvironment()
    environment.reset(TASK)
    assert [environment.step(call).done for call in (PARIS, ROME)] == [False, True]
    assert environment.step(ROME).observation is None


def test_an_extra_call_after_done_is_still_judged():
    assert SingleStepEnvironment().run_calls(TASK, [PARIS, ROME]).passed
    assert not SingleStepEnvironment().run_calls(TASK, [PARIS, ROME, ROME]).passed


def test_an_unreadable_output_gets_the_verifiers_own_unparseable_reward():
    judgement = SingleStepEnvironment().run_output(TASK, '{"name": "get_weather", "arguments": {broken')
    assert judgement.reward == -1.0 and judgement.components["parse"] == -1.0


def test_judge_before_reset_is_a_programming_error():
    with pytest.raises(RuntimeError, match="reset"):
        SingleStepEnvironment().judge()
