"""Multi-turn episodes: observations reach the model, every way an episode can end, batched turns."""

from __future__ import annotations

import datetime
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from trainer.contracts import ExpectedCall, Task, ToolCall
from trainer.environments import make_environment
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.environments.entry_point import TimedEnvironment, load_environment
from trainer.episodes import Episode, run_episodes
from trainer.prompts import format_tool_calls
from trainer.spec.environments import EpisodeBudget
from trainer.verifiers import SafetyPolicy


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


# --- Environments that misbehave: an episode fails with the reason, the job goes on -----------------


class Stalling(Locker):
    """A team's locker whose `stall` tool never returns until the test lets it go."""

    release = threading.Event()

    def step(self, call: ToolCall) -> StepResult:
        if call.name == "stall":
            self.release.wait(30)
        return super().step(call)


def caller(name: str) -> Callable[[list[Episode]], list[Scripted]]:
    """Task "a" calls `name`; the others read the code and open the locker."""

    def replies(episodes: list[Episode]) -> list[Scripted]:
        answers = reader(episodes)
        return [Scripted(call(name)) if e.task.id == "a" else r for e, r in zip(episodes, answers, strict=True)]

    return replies


@pytest.fixture
def team_lockers(tmp_path, monkeypatch):
    """A team's module whose factories build the lockers above, as `make_environment` finds an entry point."""
    (tmp_path / "team_lockers.py").write_text(
        "from tests.trainer.test_episodes import Locker, Stalling\n"
        "def locker(policy):\n    return Locker()\n"
        "def stalling(policy):\n    return Stalling()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "team_lockers"
    sys.modules.pop("team_lockers", None)


def test_a_team_environment_that_raises_ends_its_episode_with_the_error(team_lockers):
    environment = make_environment(f"{team_lockers}:locker")
    broken, fine = run_episodes([task("a"), task("b")], environment.spawn, caller("explode"), EpisodeBudget())
    assert broken.ended == "error" and not broken.judgement.passed
    assert broken.judgement.reason == "turn 1: environment error on explode: RuntimeError: the sandbox broke"
    assert fine.judgement.passed


def test_a_team_environment_that_hangs_ends_its_episode_after_the_call_timeout(team_lockers):
    environment = load_environment(f"{team_lockers}:stalling", SafetyPolicy.default(), call_timeout_s=0.2)
    Stalling.release.clear()
    started = time.monotonic()
    try:
        stuck, fine = run_episodes([task("a"), task("b")], environment.spawn, caller("stall"), EpisodeBudget())
    finally:
        Stalling.release.set()  # let the abandoned thread finish
    assert time.monotonic() - started < 10
    assert stuck.ended == "error" and not stuck.judgement.passed
    assert "environment error on stall: TimeoutError: environment step timed out after 0.2 s" in stuck.judgement.reason
    assert fine.ended == "done" and fine.judgement.passed


def test_a_timed_out_environment_refuses_further_calls_at_once_and_closes_quietly():
    release = threading.Event()
    timed = TimedEnvironment(Locker(), call_timeout_s=0.1)
    timed.reset(task("a"))
    timed.inner.step = lambda call: release.wait(30)  # type: ignore[method-assign]
    with pytest.raises(TimeoutError, match="environment step timed out after 0.1 s"):
        timed.step(ToolCall("read_code"))
    with pytest.raises(TimeoutError, match="environment judge not run: its step timed out and is still running"):
        timed.judge()
    timed.close()
    release.set()


def test_a_timed_environment_runs_an_episode_on_one_thread_of_its_own():
    threads = []

    class ThreadBound(Locker):
        def reset(self, task: Task) -> None:
            threads.append(threading.get_ident())
            super().reset(task)

        def step(self, call: ToolCall) -> StepResult:
            threads.append(threading.get_ident())
            return super().step(call)

    [episode] = run_episodes([task("a")], TimedEnvironment(ThreadBound()).spawn, reader, EpisodeBudget())
    assert episode.judgement.passed and len(threads) == 3
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()


class Unprintable:
    def __str__(self) -> str:
        raise ValueError("no text for this")


class Odd(Locker):
    """A team's environment whose observations JSON cannot hold."""

    observations: ClassVar[dict[str, Any]] = {
        "bytes": {"blob": b"\x00\xff", "score": float("nan"), "best": float("inf")},
        "keys": {(1, 2): "a tuple key", 3: "an int key", "when": datetime.date(2024, 5, 17), "tags": {"x"}},
        "object": Unprintable(),
    }

    def step(self, call: ToolCall) -> StepResult:
        if call.name in self.observations:
            return StepResult(self.observations[call.name], done=False)
        if call.name == "loop":
            looped: list[Any] = []
            looped.append(looped)
            return StepResult(looped, done=False)
        if call.name == "bare":
            return {"not": "a StepResult"}  # type: ignore[return-value]
        return super().step(call)


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    ("tool", "seen"),
    [
        ("bytes", {"blob": "b'\\x00\\xff'", "score": "nan", "best": "inf"}),
        ("keys", {"(1, 2)": "a tuple key", "3": "an int key", "when": "2024-05-17", "tags": ["x"]}),
    ],
)
def test_an_observation_json_cannot_hold_reaches_the_model_as_strict_json_text(tool, seen):
    [episode] = run_episodes([task("b")], Odd, lambda live: [Scripted(call(tool))] * len(live), EpisodeBudget(2))
    contents = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert [strict_json(content) for content in contents] == [seen, seen]
    assert episode.ended == "turn_budget"


@pytest.mark.parametrize("tool", ["object", "loop"])
def test_an_observation_that_cannot_be_written_at_all_is_named_by_its_type(tool):
    [episode] = run_episodes([task("b")], Odd, lambda live: [Scripted(call(tool))] * len(live), EpisodeBudget(1))
    [content] = [m["content"] for m in episode.messages if m["role"] == "tool"]
    assert content.startswith("<an observation of type ") and content.endswith(" that cannot be shown>")


def test_a_step_that_returns_no_step_result_ends_its_episode_with_the_reason():
    [episode] = run_episodes([task("b")], Odd, lambda live: [Scripted(call("bare"))] * len(live), EpisodeBudget())
    assert episode.ended == "error"
    assert "environment error on bare: TypeError: step returned a dict, not a StepResult" in episode.judgement.reason
