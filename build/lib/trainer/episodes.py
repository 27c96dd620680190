"""Multi-turn episodes: the model answers, its calls run in an environment, the results go back to it.

`run_episodes(tasks, spawn, respond, budget)` drives one episode per task, all live episodes a
turn at a time: `respond` gets every live episode (its `conversation` is a Task whose messages
are the task's own plus the turns so far) and answers each in one batch; the calls of each
answer run in that episode's environment (`spawn()` builds one per episode), and each call's
observation goes back as a tool message. An episode ends when the model answers without a
call (`answered`), the environment says it is done (`done`), an answer cannot be read
(`unreadable`, judged at the environment's floor, as `Environment.run_output` judges it), a
call breaks the environment (`error`, also at the floor, with the exception named), or a
budget runs out: turns (`turn_budget`) or generated tokens (`token_budget`), both recorded as
truncated. Then the environment judges the whole episode: its end state, every call's safety.

An observation goes back as its text, else as strict JSON, values JSON lacks (bytes, NaN, keys
that are not strings, objects) written as their text, so whatever a team's `step` returns
reaches the model and never breaks the episode. No torch here: `respond` is where a
generation backend comes in. Not covered: timeouts on a hanging environment (a team's entry
point is timed by `trainer.environments.entry_point`, an MCP server by its client; the
built-in environments are ours).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from trainer.contracts import Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.parsing import NO_CALL, parse_tool_calls
from trainer.spec.environments import EpisodeBudget

ANSWERED, DONE, UNREADABLE, ERROR, TURN_BUDGET, TOKEN_BUDGET = (
    "answered", "done", "unreadable", "error", "turn_budget", "token_budget",
)  # fmt: skip
TRUNCATING_ENDS = (TURN_BUDGET, TOKEN_BUDGET)


class Reply(Protocol):
    """One model answer, as a generation backend returns it (`trainer.rollout.Generation`)."""

    @property
    def text(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def finished(self) -> bool: ...
    @property
    def latency_s(self) -> float: ...


@dataclass(frozen=True)
class Turn:
    """One model answer in an episode, the calls read from it and what each call observed."""

    text: str
    calls: list[ToolCall]
    observations: list[Any]
    prompt_tokens: int
    completion_tokens: int
    finished: bool
    latency_s: float


@dataclass
class Episode:
    """One task's episode: its turns, why it ended, and the environment's judgement of it."""

    task: Task
    environment: Environment
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    ended: str | None = None
    failure: str = ""
    judgement: Judgement | None = None

    @property
    def live(self) -> bool:
        return self.ended is None

    @property
    def conversation(self) -> Task:
        """The task as the model sees it now: its own messages, then this episode's turns."""
        return replace(self.task, messages=[*self.task.messages, *self.messages])

    @property
    def calls(self) -> list[ToolCall]:
        return [call for turn in self.turns for call in turn.calls]

    @property
    def completion_tokens(self) -> int:
        return sum(turn.completion_tokens for turn in self.turns)

    @property
    def prompt_tokens(self) -> int:
        return sum(turn.prompt_tokens for turn in self.turns)

    @property
    def latency_s(self) -> float:
        return sum(turn.latency_s for turn in self.turns)

    @property
    def truncated(self) -> bool:
        return self.ended in TRUNCATING_ENDS

    @property
    def output(self) -> str:
        """The model's answers, one turn after the other (what a single-turn result holds in `output`)."""
        return "\n".join(turn.text for turn in self.turns)


def run_episodes(
    tasks: Sequence[Task],
    spawn: Callable[[], Environment],
    respond: Callable[[list[Episode]], Sequence[Reply]],
    budget: EpisodeBudget,
) -> list[Episode]:
    """One judged episode per task, in task order, every live episode answered in the same batch each turn."""
    episodes: list[Episode] = []
    try:
        for task in tasks:
            episodes.append(_start(task, spawn()))
        _play(episodes, respond, budget)
    finally:
        for episode in episodes:
            episode.environment.close()
    return episodes


def _play(episodes: list[Episode], respond: Callable[[list[Episode]], Sequence[Reply]],
          budget: EpisodeBudget) -> None:
    for _ in range(budget.max_turns):
        live = [episode for episode in episodes if episode.live]
        if not live:
            break
        replies = respond(live)
        if len(replies) != len(live):
            raise ValueError(f"{len(live)} conversations but {len(replies)} replies")
        for episode, reply in zip(live, replies, strict=True):
            _take_turn(episode, reply, budget)
    for episode in episodes:
        if episode.live:
            episode.ended = TURN_BUDGET
        episode.judgement = _judge(episode)


def _start(task: Task, environment: Environment) -> Episode:
    offered = environment.offered_tools()
    if offered is not None:
        task = replace(task, tools=offered)
    episode = Episode(task=task, environment=environment)
    try:
        environment.reset(task)
    except Exception as error:  # noqa: BLE001 - an episode that cannot start fails alone, with the reason
        episode.ended, episode.failure = ERROR, f"environment error at reset: {type(error).__name__}: {error}"
    return episode


def _take_turn(episode: Episode, reply: Reply, budget: EpisodeBudget) -> None:
    parsed = parse_tool_calls(reply.text)
    calls = parsed.calls if parsed.ok else []
    turn = Turn(
        text=reply.text,
        calls=calls,
        observations=[],
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        finished=reply.finished,
        latency_s=reply.latency_s,
    )
    episode.turns.append(turn)
    if not parsed.ok and parsed.error_kind != NO_CALL:
        episode.ended, episode.failure = UNREADABLE, str(parsed.error)
        episode.messages.append({"role": "assistant", "content": reply.text})
        return
    if not calls:
        episode.ended = ANSWERED
        episode.messages.append({"role": "assistant", "content": reply.text})
        return
    _run_calls(episode, turn, len(episode.turns))
    if episode.live and episode.completion_tokens >= budget.max_tokens:
        episode.ended = TOKEN_BUDGET


def _run_calls(episode: Episode, turn: Turn, number: int) -> None:
    """Each call of the turn in the environment, its observation appended as the tool's message."""
    ids = [f"call_{number}_{index}" for index in range(len(turn.calls))]
    episode.messages.append({"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
        for call_id, call in zip(ids, turn.calls, strict=True)
    ]})  # fmt: skip
    for call_id, call in zip(ids, turn.calls, strict=True):
        try:
            result = episode.environment.step(call)
            if not isinstance(result, StepResult):
                raise TypeError(f"step returned a {type(result).__name__}, not a StepResult")
        except Exception as error:  # noqa: BLE001 - a broken environment ends this episode, not the batch
            episode.ended, episode.failure = ERROR, f"environment error on {call.name}: {type(error).__name__}: {error}"
            return
        turn.observations.append(result.observation)
        content = _observation_text(result.observation)
        episode.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if result.done:
            episode.ended = DONE
            return


def _observation_text(observation: Any) -> str:
    if isinstance(observation, str):
        return observation
    try:
        return json.dumps(_plain(observation), ensure_ascii=False, allow_nan=False)
    except Exception:  # noqa: BLE001 - a self-containing value, or an object whose str() raises
        return f"<an observation of type {type(observation).__name__} that cannot be shown>"


def _plain(value: Any) -> Any:
    """`value` with what JSON cannot hold turned into text: bytes, NaN and infinities, other keys, objects."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {key if isinstance(key, str) else str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(item) for item in value]
    return str(value)


def _judge(episode: Episode) -> Judgement:
    """The environment's judgement of the whole episode, with its turns and truncation."""
    environment, task = episode.environment, episode.task
    if episode.ended in (UNREADABLE, ERROR):
        reason = f"turn {len(episode.turns)}: " + (
            f"the answer could not be read: {episode.failure}" if episode.ended == UNREADABLE else episode.failure
        )
        return Judgement(task_id=task.id, reward=environment.floor, passed=False, reason=reason,
                         components={episode.ended: environment.floor}, turns=len(episode.turns),
                         execution_success=False if environment.executes else None)  # fmt: skip
    try:
        judged = environment.judge()
    except Exception as error:  # noqa: BLE001 - the episode gets a judgement even when judging breaks
        return Judgement(
            task_id=task.id,
            reward=environment.floor,
            passed=False,
            components={ERROR: environment.floor},
            reason=f"environment error while judging: {type(error).__name__}: {error}",
            turns=len(episode.turns),
            execution_success=False if environment.executes else None,
        )
    reason = judged.reason + (f"; stopped by the {str(episode.ended).replace('_', ' ')}" if episode.truncated else "")
    return replace(judged, turns=len(episode.turns), truncated=judged.truncated or episode.truncated, reason=reason)
