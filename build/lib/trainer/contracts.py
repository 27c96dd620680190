"""The JSON contracts that tasks, verifiers and the web app share: Task, ToolCall, Verdict.

A Task is one regression or benchmark item: the chat so far (OpenAI messages), the tools
offered (OpenAI `tools` form) and the calls a correct answer makes. Each expected argument
lists its accepted alternatives, as BFCL does; the empty string among them means the
argument may be omitted. A Verdict is a verifier's judgement of one completion.

Every dataclass here converts to and from plain JSON (`to_json` / `from_json`). This module
does not parse model text (see `trainer.parsing`) and does not score (see `trainer.verifiers`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

OMITTABLE = ""
"""Listed among an argument's alternatives, it means the argument may be left out."""


class ContractError(ValueError):
    """A JSON document does not follow the contract; the message names the field."""


def _require(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ContractError(f"{where}: missing '{key}'")
    value = data[key]
    if not isinstance(value, kind):
        raise ContractError(f"{where}: '{key}' must be {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


@dataclass(frozen=True)
class ToolCall:
    """One call a model made: a tool name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolCall:
        name = _require(data, "name", str, "tool call")
        arguments = data.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ContractError(f"tool call {name}: 'arguments' must be an object")
        return cls(name=name, arguments=arguments)


@dataclass(frozen=True)
class ExpectedCall:
    """A call a correct answer makes; each argument maps to its accepted alternatives."""

    name: str
    arguments: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def exact(cls, name: str, arguments: Mapping[str, Any]) -> ExpectedCall:
        """An expected call whose every argument has exactly one accepted value."""
        return cls(name=name, arguments={key: [value] for key, value in arguments.items()})

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExpectedCall:
        name = _require(data, "name", str, "expected call")
        arguments = data.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ContractError(f"expected call {name}: 'arguments' must be an object")
        for key, alternatives in arguments.items():
            if not isinstance(alternatives, list) or not alternatives:
                raise ContractError(
                    f"expected call {name}: argument '{key}' must be a non-empty list of accepted values"
                )
        return cls(name=name, arguments=arguments)


@dataclass(frozen=True)
class TaskMetadata:
    """Where a task came from and how the app files it; all optional."""

    source: str | None = None
    bucket: str | None = None
    split: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in vars(self).items() if value is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskMetadata:
        known = {key: data.get(key) for key in ("source", "bucket", "split")}
        for key, value in known.items():
            if value is not None and not isinstance(value, str):
                raise ContractError(f"task metadata: '{key}' must be a string")
        return cls(**known)


@dataclass(frozen=True)
class EpisodeSetup:
    """Where a task's episode starts and what a solved one ends in, for a task played as an episode.

    `environment` names the environment that plays it (as a job's `environment` does; None: the
    job's); `start_state` is what that environment starts from (its own shape: WorkBench takes
    none, `replay` the recorded calls and results of a production trajectory); `expected_state`,
    where set, is the end state a solved episode reaches, in the environment's own shape. A task
    with an expected state may leave `expected_calls` empty: the end state judges it.
    """

    environment: str | None = None
    start_state: dict[str, Any] = field(default_factory=dict)
    expected_state: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"environment": self.environment, "start_state": self.start_state}
        if self.expected_state is not None:
            data["expected_state"] = self.expected_state
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> EpisodeSetup:
        environment = data.get("environment")
        if environment is not None and not (isinstance(environment, str) and environment.strip()):
            raise ContractError(f"{where}: episode 'environment' must be a non-empty string or null")
        start_state = data.get("start_state") or {}
        if not isinstance(start_state, dict):
            raise ContractError(f"{where}: episode 'start_state' must be an object")
        expected_state = data.get("expected_state")
        if expected_state is not None and not isinstance(expected_state, dict):
            raise ContractError(f"{where}: episode 'expected_state' must be an object or null")
        return cls(environment=environment, start_state=start_state, expected_state=expected_state)


def openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Return `tool` in OpenAI chat form, accepting bare and Responses-API (flat) forms too."""
    if "function" in tool and isinstance(tool["function"], Mapping):
        function = tool["function"]
    else:
        function = {key: value for key, value in tool.items() if key not in ("type", "strict")}
    if not isinstance(function.get("name"), str):
        raise ContractError("tool: missing 'name'")
    return {"type": "function", "function": dict(function)}


@dataclass(frozen=True)
class Task:
    """One item to verify against: the chat, the tools offered and the expected calls.

    `episode`, where set, makes the task an episode: the environment, its starting state and the
    expected end state (`EpisodeSetup`); the expected calls are then the reference episode's calls.
    """

    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    expected_calls: list[ExpectedCall]
    no_call_expected: bool = False
    order_sensitive: bool = False
    metadata: TaskMetadata = field(default_factory=TaskMetadata)
    episode: EpisodeSetup | None = None

    def __post_init__(self) -> None:
        if self.no_call_expected and self.expected_calls:
            raise ContractError(f"task {self.id}: no_call_expected is set but expected_calls is not empty")
        judged_by_state = self.episode is not None and self.episode.expected_state is not None
        if not self.no_call_expected and not self.expected_calls and not judged_by_state:
            raise ContractError(f"task {self.id}: expected_calls is empty; set no_call_expected "
                                "(or an episode's expected_state) instead")

    @cached_property
    def tool_schemas(self) -> dict[str, dict[str, Any]]:
        """The `parameters` JSON schema of each offered tool, by tool name (computed once)."""
        return {tool["function"]["name"]: tool["function"].get("parameters") or {} for tool in self.tools}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "messages": self.messages,
            "tools": self.tools,
            "expected_calls": [call.to_json() for call in self.expected_calls],
            "no_call_expected": self.no_call_expected,
            "order_sensitive": self.order_sensitive,
        }
        metadata = self.metadata.to_json()
        if metadata:
            data["metadata"] = metadata
        if self.episode is not None:
            data["episode"] = self.episode.to_json()
        return data

    def to_json_line(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        task_id = _require(data, "id", (str, int), "task")
        where = f"task {task_id}"
        messages = _require(data, "messages", list, where)
        tools = _require(data, "tools", list, where)
        expected = _require(data, "expected_calls", list, where)
        episode = data.get("episode")
        if episode is not None and not isinstance(episode, Mapping):
            raise ContractError(f"{where}: 'episode' must be an object")
        return cls(
            id=str(task_id),
            messages=messages,
            tools=[openai_tool(tool) for tool in tools],
            expected_calls=[ExpectedCall.from_json(call) for call in expected],
            no_call_expected=bool(data.get("no_call_expected", False)),
            order_sensitive=bool(data.get("order_sensitive", False)),
            metadata=TaskMetadata.from_json(data.get("metadata") or {}),
            episode=EpisodeSetup.from_json(episode, where) if episode is not None else None,
        )


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of one completion; `components` add up to `reward`."""

    id: str
    reward: float
    passed: bool
    components: dict[str, float]
    reason: str
    violations: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "reward": round(self.reward, 6),
            "passed": self.passed,
            "components": {name: round(value, 6) for name, value in self.components.items()},
            "reason": self.reason,
            "violations": self.violations,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(
            id=str(_require(data, "id", (str, int), "verdict")),
            reward=float(_require(data, "reward", (int, float), "verdict")),
            passed=bool(_require(data, "passed", bool, "verdict")),
            components=dict(_require(data, "components", dict, "verdict")),
            reason=str(_require(data, "reason", str, "verdict")),
            violations=list(data.get("violations", [])),
        )


# --- The job protocol (DESIGN.md): a RunSpec in, one event per line out -------------------

JOB_KINDS = ("eval", "sft", "dpo", "grpo", "gate", "mine", "replay", "synth", "judge")
# The worker names its pid here so that a trainer whose worker died before it started stops at once.
PARENT_PID_ENV = "FLYWHEEL_PARENT_PID"


@dataclass(frozen=True)
class RunSpec:
    """What one job attempt runs: the app writes it as run.json for `python -m trainer <kind>`.

    `hyperparameters` is the kind's own typed config in JSON form (for `eval`, the fields of
    `trainer.spec.eval.EvalConfig`); `adapter` is the parent adapter to start from or evaluate.
    `task_paths` are the tasks the kind works on (trained on for sft and grpo, evaluated for
    eval and gate); `heldout_paths` the held-out tasks a training run evaluates as it goes;
    `regression_paths` the regression tasks a gate must not break (for `replay`, `task_paths` hold
    replay cases, `trainer.spec.replay`; for `dpo`, preference pairs, `trainer.spec.pairs`).
    `safety_policy` is the agent's `SafetyPolicy` as JSON (None: the default policy), which every
    kind judges unsafe calls by.
    Paths may be relative; `trainer.jobs.load_spec` resolves them against the spec's folder.
    """

    kind: str
    base_model: str
    task_paths: list[str]
    output_dir: str
    adapter: str | None = None
    seed: int = 0
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    heldout_paths: list[str] = field(default_factory=list)
    regression_paths: list[str] = field(default_factory=list)
    safety_policy: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "base_model": self.base_model,
            "task_paths": self.task_paths,
            "output_dir": self.output_dir,
            "adapter": self.adapter,
            "seed": self.seed,
            "hyperparameters": self.hyperparameters,
            "heldout_paths": self.heldout_paths,
            "regression_paths": self.regression_paths,
            "safety_policy": self.safety_policy,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSpec:
        kind = _require(data, "kind", str, "run spec")
        if kind not in JOB_KINDS:
            raise ContractError(f"run spec: unknown kind {kind!r}; known: {', '.join(JOB_KINDS)}")
        task_paths = _path_list(data, "task_paths", required=True)
        adapter = data.get("adapter")
        if adapter is not None and not isinstance(adapter, str):
            raise ContractError("run spec: 'adapter' must be a string or null")
        seed = data.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ContractError("run spec: 'seed' must be an integer")
        policy = data.get("safety_policy")
        if policy is not None and not isinstance(policy, dict):
            raise ContractError("run spec: 'safety_policy' must be an object or null")
        return cls(
            kind=kind,
            base_model=_require(data, "base_model", str, "run spec"),
            task_paths=list(task_paths),
            output_dir=_require(data, "output_dir", str, "run spec"),
            adapter=adapter,
            seed=seed,
            hyperparameters=dict(data.get("hyperparameters") or {}),
            heldout_paths=_path_list(data, "heldout_paths"),
            regression_paths=_path_list(data, "regression_paths"),
            safety_policy=policy,
        )


def _path_list(data: Mapping[str, Any], key: str, *, required: bool = False) -> list[str]:
    paths = _require(data, key, list, "run spec") if required else data.get(key, [])
    if not isinstance(paths, list) or not all(isinstance(path, str) for path in paths):
        raise ContractError(f"run spec: '{key}' must be a list of strings")
    return list(paths)


@dataclass(frozen=True)
class MetricEvent:
    """One value of a named metric at a step (an eval reports its overall rates at step 0)."""

    step: int
    name: str
    value: float

    def to_json(self) -> dict[str, Any]:
        return {"event": "metric", "step": self.step, "name": self.name, "value": self.value}


@dataclass(frozen=True)
class SampleEvent:
    """One completion worth showing: the prompt, what the model wrote, its reward and components.

    `episode`, where the completion was a multi-turn episode: its turns as OpenAI chat messages
    (the model's answers, its calls, the environment's results), after the task's own messages.
    """

    step: int
    task_id: str
    prompt: str
    completion: str
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    episode: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        line = {"event": "sample", "step": self.step, "task_id": self.task_id, "prompt": self.prompt,
                "completion": self.completion, "reward": self.reward, "components": self.components}
        if self.episode is not None:
            line["episode"] = self.episode
        return line


@dataclass(frozen=True)
class CheckpointEvent:
    """A checkpoint (an adapter folder with its manifest) written at a training step."""

    step: int
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"event": "checkpoint", "step": self.step, "path": self.path}


@dataclass(frozen=True)
class LogEvent:
    """A line for the job's log tail; `level` is info or warning."""

    message: str
    level: str = "info"

    def to_json(self) -> dict[str, Any]:
        return {"event": "log", "level": self.level, "message": self.message}


@dataclass(frozen=True)
class DoneEvent:
    """The job finished: its overall metrics, the per-task results file and any other files by role."""

    metrics: dict[str, Any]
    results: str | None = None
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"event": "done", "metrics": self.metrics, "results": self.results, "files": self.files}


@dataclass(frozen=True)
class ErrorEvent:
    """The job failed (or was stopped); `kind` lets the app tell bad input from a crash or a cancel."""

    message: str
    kind: str = "internal"

    def to_json(self) -> dict[str, Any]:
        return {"event": "error", "kind": self.kind, "message": self.message}


JobEvent = MetricEvent | SampleEvent | CheckpointEvent | LogEvent | DoneEvent | ErrorEvent


def event_from_json(data: Mapping[str, Any]) -> JobEvent:
    """The event one protocol line holds; an unknown `event` or a missing field is a ContractError."""
    name = _require(data, "event", str, "event")
    fields = {key: value for key, value in data.items() if key != "event"}
    classes: dict[str, type] = {
        "metric": MetricEvent, "sample": SampleEvent, "checkpoint": CheckpointEvent,
        "log": LogEvent, "done": DoneEvent, "error": ErrorEvent,
    }
    if name not in classes:
        raise ContractError(f"event: unknown event {name!r}; known: {', '.join(classes)}")
    try:
        event: JobEvent = classes[name](**fields)
    except TypeError as error:
        raise ContractError(f"{name} event: {error}") from None
    return event


def read_json_lines(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON object on each non-blank line; a bad line raises with its number."""
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise ContractError(f"{path}:{number}: invalid JSON: {error.msg}") from None
