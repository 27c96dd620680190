"""The `replay` job's config and its input: the conversation of a failing step, to answer again.

A replay case is a production trajectory cut just before its failing step (the app cuts it as
it drafts a task, `flywheel.datasets.conversion.task_draft`): the messages so far, the tools
offered, the answer recorded there (`original`, an OpenAI assistant message, or null), and the
expected answer where one is known (null: unknown; then nothing is judged correct or wrong).
One case is one JSON line:

    {"id": "…", "messages": [...], "tools": [...],
     "expected": null | {"expected_calls": [...], "no_call_expected": false, "order_sensitive": false},
     "original": null | {"role": "assistant", "content": null, "tool_calls": [...]}}

The job (`trainer.replay`) loads the base model with the version's adapter, generates the one
next answer of each case and scores it and the original alike (`trainer.verifiers.answer`).
Nothing here imports torch; the app writes cases and checks a launch's hyperparameters with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import ContractError, Task, read_json_lines
from trainer.spec.config import SpecError, check_at_least
from trainer.spec.eval import BACKENDS, SamplingConfig


@dataclass(frozen=True)
class ReplayConfig:
    """A replay job's settings, read from the spec's `hyperparameters`."""

    backend: str = field(
        default="transformers",
        metadata={
            "help": "Generation backend: transformers, vllm, or auto (vllm where it is installed and a GPU exists)."
        },
    )
    device: str = field(default="auto", metadata={"help": "Torch device for transformers: auto, cpu, cuda, cuda:1 ..."})
    max_new_tokens: int = field(default=256, metadata={"help": "Most tokens generated for the answer."})
    temperature: float = field(
        default=0.0,
        metadata={
            "help": "0 for greedy decoding (a replay run twice answers the same), else the sampling temperature."
        },
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (sampled decoding only)."})
    safety_policy: str | None = field(
        default=None,
        metadata={"help": "Path of a safety policy JSON; null for the spec's (the agent's policy), else the default."},
    )

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        check_at_least(self, 1, "max_new_tokens")
        self.sampling(seed=0)  # SamplingConfig checks temperature and top_p

    def sampling(self, seed: int) -> SamplingConfig:
        return SamplingConfig(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p, batch_size=1, seed=seed
        )


@dataclass(frozen=True)
class ReplayCase:
    """One conversation to answer again; see the module docstring for its JSON."""

    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    expected: dict[str, Any] | None = None
    original: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.task()  # the messages, tools and expected answer must make a task

    @property
    def has_expected(self) -> bool:
        return self.expected is not None

    def task(self) -> Task:
        """The case as a task: to render its prompt, and to judge against where the expected answer is known.

        With none known it stands as a task that expects no call, as the served chat does, and is
        used only for its messages and tools (`expected=False` in `score_answer`).
        """
        expected = self.expected or {"expected_calls": [], "no_call_expected": True}
        return Task.from_json({"id": self.id, "messages": self.messages, "tools": self.tools, **expected})

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "messages": self.messages, "tools": self.tools, "expected": self.expected,
                "original": self.original}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReplayCase:
        where = f"replay case {data.get('id')!r}"
        case_id, messages, tools = data.get("id"), data.get("messages"), data.get("tools", [])
        if not isinstance(case_id, str) or not case_id:
            raise ContractError(f"{where}: 'id' must be a non-empty string")
        if not isinstance(messages, list) or not messages or not isinstance(tools, list):
            raise ContractError(f"{where}: 'messages' must be a non-empty list and 'tools' a list")
        expected, original = data.get("expected"), data.get("original")
        if expected is not None and not (isinstance(expected, dict) and set(expected) <= _EXPECTED_KEYS):
            raise ContractError(f"{where}: 'expected' must be null or an object of {', '.join(sorted(_EXPECTED_KEYS))}")
        if original is not None and not isinstance(original, dict):
            raise ContractError(f"{where}: 'original' must be null or an assistant message")
        return cls(id=case_id, messages=messages, tools=tools, expected=expected, original=original)


_EXPECTED_KEYS = frozenset({"expected_calls", "no_call_expected", "order_sensitive"})


def read_replay_cases(paths: Sequence[str]) -> list[ReplayCase]:
    """Every case in the files, in order; a SpecError names a missing file or the first bad line."""
    cases = []
    for path in paths:
        try:
            for number, line in enumerate(read_json_lines(path), start=1):
                cases.append(_case(line, f"{path}, case {number}"))
        except FileNotFoundError:
            raise SpecError(f"replay cases not found: {path}") from None
        except ContractError as error:
            raise SpecError(str(error)) from None
    if not cases:
        raise SpecError("no replay case to answer")
    return cases


def _case(line: Any, where: str) -> ReplayCase:
    if not isinstance(line, dict):
        raise ContractError(f"{where}: a replay case must be a JSON object")
    try:
        return ReplayCase.from_json(line)
    except ContractError as error:
        raise ContractError(f"{where}: {error}") from None
