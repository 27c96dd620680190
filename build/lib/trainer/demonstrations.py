"""Reference episodes for episode SFT: a task's reference calls played in its environment, as training tokens.

`play_references` plays each task's reference calls (`trainer.prompts.reference_calls`), one
call per turn, through the same episode loop evaluation runs (`trainer.episodes.run_episodes`),
so the observations in a demonstration are the environment's own and its messages are built
exactly as an evaluated episode's are. After the last call comes one answer without a call,
`trainer.prompts.CLOSING_TEXT`, which ends the episode as `answered`. A call the environment
refuses is still played (the demonstration is what the reference does) and counted.
`episode_example` renders one played episode (`trainer.prompts.render_episode`) and tokenizes it
span by span: `input_ids`, and `assistant_masks` set on the tokens of the episode's assistant
turns only (each call and the closing answer, with their end-of-turn marker), the form TRL's
SFTTrainer takes a pre-tokenized example in. A task without reference calls (no call expected, or
an end state that judges it alone) is played as the closing answer by itself: answering without
acting is what it demonstrates, and leaving such tasks out teaches a model to call where it should
answer. Its episode is kept only where the environment judges that answer passed; where the
expected end state needs calls nobody wrote down, there is no reference to imitate. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainer.contracts import Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.episodes import ERROR, Reply, run_episodes
from trainer.prompts import CLOSING_TEXT, format_tool_calls, reference_calls, render_episode
from trainer.spec.environments import EpisodeBudget


@dataclass(frozen=True)
class Demonstration:
    """One played reference episode: the task as the episode offered it, its turns, and how it went."""

    task: Task
    turns: list[dict[str, Any]]
    refused: int  # reference calls the environment refused (played all the same)
    passed: bool  # the environment's judgement of the reference episode
    failure: str = ""  # why the environment broke the episode; such an episode is not trained on


@dataclass
class References:
    """The played reference episodes, and the ones an environment error broke (kept out of training)."""

    played: list[Demonstration] = field(default_factory=list)
    broken: list[Demonstration] = field(default_factory=list)
    # Tasks without reference calls whose expected end state an answer alone does not reach.
    unreferenced: list[Demonstration] = field(default_factory=list)

    @property
    def refused_calls(self) -> int:
        return sum(demonstration.refused for demonstration in self.played)

    @property
    def not_passed(self) -> int:
        return sum(1 for demonstration in self.played if not demonstration.passed)


@dataclass(frozen=True)
class _Scripted:
    """A scripted answer in the shape of a generation (`trainer.episodes.Reply`); it generates no tokens."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finished: bool = True
    latency_s: float = 0.0


class _CountingRefusals(Environment):
    """The environment as it is, counting the calls it refuses (`StepResult.ok` false)."""

    name: ClassVar[str] = "reference"

    def __init__(self, inner: Environment) -> None:
        self.inner = inner
        self.refused = 0

    def offered_tools(self) -> list[dict[str, Any]] | None:
        return self.inner.offered_tools()

    def reset(self, task: Task) -> None:
        self.inner.reset(task)

    def step(self, call: ToolCall) -> StepResult:
        result = self.inner.step(call)
        self.refused += not result.ok
        return result

    def judge(self) -> Judgement:
        return self.inner.judge()

    def close(self) -> None:
        self.inner.close()


def play_references(tasks: Sequence[Task], environment: Environment) -> References:
    """Each task's reference episode in (a copy of) `environment`, in task order, sorted by how it went."""
    references = References()
    for task in tasks:
        demonstration = play_reference(task, environment)
        if demonstration.failure:
            references.broken.append(demonstration)
        elif not task.expected_calls and not demonstration.passed:
            references.unreferenced.append(demonstration)
        else:
            references.played.append(demonstration)
    return references


def play_reference(task: Task, environment: Environment) -> Demonstration:
    """One reference episode: every reference call (if any), one a turn, then the closing answer."""
    answers = [format_tool_calls([call]) for call in reference_calls(task)] + [CLOSING_TEXT]
    script = iter(answers)
    counting = _CountingRefusals(environment.spawn())

    def respond(live: Sequence[object]) -> list[Reply]:
        return [_Scripted(next(script)) for _ in live]

    # Scripted answers generate no tokens, so only the turn budget (one turn per answer) can end it early.
    budget = EpisodeBudget(max_turns=len(answers), max_tokens=1)
    episode = run_episodes([task], lambda: counting, respond, budget)[0]
    judgement = episode.judgement
    return Demonstration(task=episode.task, turns=episode.messages, refused=counting.refused,
                         passed=bool(judgement and judgement.passed),
                         failure=episode.failure if episode.ended == ERROR else "")  # fmt: skip


def episode_example(demonstration: Demonstration, tokenizer: Any) -> dict[str, list[int]]:
    """The demonstration as TRL's pre-tokenized example: `input_ids`, and `assistant_masks` on its answers.

    Each stretch of text is tokenized alone, as generation tokenizes a prompt alone, so every mask
    boundary falls where a prompt ended; the text ends with the last answer's end-of-turn marker.
    """
    rendered = render_episode(demonstration.task, demonstration.turns, tokenizer)
    input_ids: list[int] = []
    masks: list[int] = []
    cursor = 0
    for start, end in rendered.assistant_spans:
        for text, bit in ((rendered.text[cursor:start], 0), (rendered.text[start:end], 1)):
            tokens = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            input_ids.extend(tokens)
            masks.extend([bit] * len(tokens))
        cursor = end
    return {"input_ids": input_ids, "assistant_masks": masks}
