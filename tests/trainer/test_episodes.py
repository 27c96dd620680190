"""Multi-turn episodes: observations reach the model, every way an episode can end, batched turns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.episodes import Episode, run_episodes
from trainer.prompts import format_tool_calls
from trainer.spec.environments import EpisodeBudget


@dataclass(frozen=True)
class Scripted:
    """A reply as a generation backend returns it."""

    text: str
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finished: bool = True
    latency_s: float = 0.5


def call(name: str, **arguments: Any) -> str:
    return format_tool_calls([ToolCall(name, arguments)])


class Locker(Environment):
    """A locker that opens only with the code `read_code` shows: solvable only by reading an observation."""

    name: ClassVar[str] = "locker"

    def reset(self, task: Task) -> None:
        self.code = f"code-{task.id}"
        self.opened = False
        self.calls = 0

    def step(self, call: ToolCall) -> StepResult:
        self.calls += 1
        if call.name == "read_code":
            return StepResult({"code": self.code}, done=False)
        if call.name == "open_locker":
            self.opened = call.arguments.get("code") == self.code
            return StepResult("opened" if self.opened else "wrong code", done=self.opened, ok=self.opened)
        if call.name == "explode":
            raise RuntimeError("the sandbox broke")
        return StepResult(f"no tool {call.name}", done=False, ok=False)

    def judge(self) -> Judgement:
        return Judgement(
            task_id="",
            reward=float(self.opened),
            passed=self.opened,
            reason="opened" if self.opened else "still locked",
            components={"opened": float(self.opened)},
            turns=self.calls,
        )


def task(task_id: str) -> Task:
    return Task(
        id=task_id,
        messages=[{"role": "user", "content": "Open the locker."}],
        tools=[],
        expected_calls=[ExpectedCall.exact("open_locker", {})],
    )


def reader(episodes: list[Episode]) -> list[Scripted]:
    """Reads the code from the last tool message when there is one, else asks for it; answers once opened."""
    replies = []
    for episode in episodes:
        last = episode.conversation.messages[-1]
        if last["role"] == "tool" and last["content"] == "opened":
            replies.append(Scripted("Done."))
        elif last["role"] == "tool":
            replies.append(Scripted(call("open_locker", code=json.loads(last["content"])["code"])))
        else:
            replies.append(Scripted(call("read_code")))
    return replies


def test_the_observation_of_a_call_reaches_the_model_and_solves_the_task():
    episodes = run_episodes([task("a"), task("b")], Locker, reader, EpisodeBudget(max_turns=5))
    assert [e.ended for e in episodes] == ["done", "done"]
    assert all(e.judgement.passed and e.judgement.turns == 2 for e in episodes)
    assert [c.arguments for c in episodes[1].calls] == [{}, {"code": "code-b"}]
    roles = [m["role"] for m in episodes[0].conversation.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]


def test_all_live_episodes_answer_in_one_batch_per_turn():
    sizes = []

    def counting(episodes):
        sizes.append(len(episodes))
        return reader(episodes)

    tasks = [task("a"), task("b"), task("c")]
    run_episodes(tasks, Locker, counting, EpisodeBudget(max_turns=5))
    assert sizes == [3, 3]


def test_an_answer_without_a_call_ends_the_episode_and_the_environment_judges_it():
    [episode] = run_episodes([task("a")], Locker, lambda cs: [Scripted("I cannot.")] * len(cs), EpisodeBudget())
    assert episode.ended == "answered" and not episode.judgement.passed
    assert episode.judgement.reason == "still locked" and not episode.judgement.truncated


def test_an_unreadable_answer_gets_the_floor_and_says_why():
    unreadable = '<tool_call>{"name": "read_code", "arguments": </tool_call>'
    [episode] = run_episodes([task("a")], Locker, lambda cs: [Scripted(unreadable)] * len(cs), EpisodeBudget())
    assert episode.ended == "unreadable"
    assert episode.judgement.reward == 0.0
    assert episode.judgement.reason.startswith("turn 1: the answer could not be read")


def test_an_environment_that_raises_ends_its_episode_with_the_error_and_the_others_go_on():
    def replies(episodes):
        answers = reader(episodes)
        return [Scripted(call("explode")) if e.task.id == "a" else r for e, r in zip(episodes, answers, strict=True)]

    broken, fine = run_episodes([task("a"), task("b")], Locker, replies, EpisodeBudget())
    assert broken.ended == "error" and "RuntimeError: the sandbox broke" in broken.judgement.reason
    assert not broken.judgement.passed and fine.judgement.passed


def test_the_turn_budget_truncates_an_episode_that_keeps_calling():
    [episode] = run_episodes(
        [task("a")], Locker, lambda cs: [Scripted(call("read_code"))] * len(cs), EpisodeBudget(max_turns=3)
    )
    assert episode.ended == "turn_budget" and len(episode.turns) == 3
    assert episode.judgement.truncated and "stopped by the turn budget" in episode.judgement.reason


def test_the_token_budget_counts_every_turn():
    long_reply = Scripted(call("read_code"), completion_tokens=40)
    [episode] = run_episodes(
        [task("a")], Locker, lambda cs: [long_reply] * len(cs), EpisodeBudget(max_turns=10, max_tokens=100)
    )
    assert episode.ended == "token_budget" and episode.completion_tokens == 120 and episode.judgement.truncated


def test_a_budget_needs_a_turn_and_a_token():
    with pytest.raises(ValueError):
        EpisodeBudget(max_turns=0)


class PickyLocker(Locker):
    def reset(self, task: Task) -> None:
        if task.id == "a":
            raise ConnectionError("the locker service is down")
        super().reset(task)


def test_an_episode_whose_environment_cannot_start_fails_alone_and_is_never_asked_to_answer():
    asked = []

    def replies(episodes):
        asked.extend(e.task.id for e in episodes)
        return reader(episodes)

    broken, fine = run_episodes([task("a"), task("b")], PickyLocker, replies, EpisodeBudget())
    assert broken.ended == "error"
    assert "at reset: ConnectionError: the locker service is down" in broken.judgement.reason
    assert broken.turns == [] and set(asked) == {"b"} and fine.judgement.passed
