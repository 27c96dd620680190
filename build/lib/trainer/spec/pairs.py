"""Preference pairs: the `dpo` job's training input, read from JSONL in TRL's conversational preference format.

One pair a line: `{"id", "prompt": [messages], "chosen": [one assistant message], "rejected": [one
assistant message], "tools": [OpenAI function schemas]}`. An answer is plain text (`content`) and/or
tool calls in OpenAI's shape (`tool_calls: [{"type": "function", "function": {"name", "arguments"}}]`,
arguments an object or its JSON text). A pair holds one answer each way: the step a reviewer corrected
(chosen: the correction, rejected: what the agent did). `read_pair_files` reads them strictly or
leniently, as `trainer.spec.tasks.read_task_files` reads tasks, with the same `SkippedLine` report.
`PreferencePair.prompt_task` is the pair's prompt as a task, which `trainer.prompts` renders exactly as
evaluation and serving render the same conversation. No torch here; rendering and training are `trainer.dpo`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.contracts import ContractError, Task, openai_tool
from trainer.parsing import parse_tool_calls
from trainer.spec.tasks import SkippedLine, read_jsonl

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class PreferencePair:
    """One prompt with a preferred answer and a rejected one (each a single assistant message)."""

    id: str
    prompt: list[dict[str, Any]]
    chosen: dict[str, Any]
    rejected: dict[str, Any]
    tools: list[dict[str, Any]] = field(default_factory=list)

    def prompt_task(self) -> Task:
        """The prompt as a task (no call judged: it is only rendered), so it renders as evaluation renders it."""
        return Task(id=self.id, messages=self.prompt, tools=self.tools, expected_calls=[], no_call_expected=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreferencePair:
        pair_id = data.get("id")
        if not isinstance(pair_id, (str, int)) or isinstance(pair_id, bool):
            raise ContractError("preference pair: missing 'id' (a string)")
        where = f"pair {pair_id}"
        prompt = data.get("prompt")
        if not isinstance(prompt, list) or not prompt:
            raise ContractError(f"{where}: 'prompt' must be a non-empty list of messages")
        for message in prompt:
            _check_message(message, where)
        if prompt[-1].get("role") == "assistant":
            raise ContractError(f"{where}: the prompt ends with an assistant message; the answers follow it")
        tools = data.get("tools") or []
        if not isinstance(tools, list):
            raise ContractError(f"{where}: 'tools' must be a list of function schemas")
        chosen, rejected = _answer(data, "chosen", where), _answer(data, "rejected", where)
        if _same_answer(chosen, rejected):
            raise ContractError(f"{where}: 'chosen' and 'rejected' are the same answer: the pair prefers nothing")
        return cls(id=str(pair_id), prompt=list(prompt), chosen=chosen, rejected=rejected,
                   tools=[openai_tool(tool) for tool in tools])


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, Mapping) or message.get("role") not in ROLES:
        raise ContractError(f"{where}: each message must be an object with a role ({', '.join(ROLES)})")


def _answer(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """The single assistant message of `chosen` or `rejected`, its tool calls checked readable."""
    answer = data.get(key)
    if not isinstance(answer, list) or len(answer) != 1:
        raise ContractError(f"{where}: '{key}' must be a list holding one assistant message")
    message = answer[0]
    _check_message(message, where)
    if message["role"] != "assistant":
        raise ContractError(f"{where}: '{key}' must be an assistant message, got role {message['role']!r}")
    content, calls = message.get("content") or "", message.get("tool_calls") or []
    if not isinstance(content, str) or not isinstance(calls, list):
        raise ContractError(f"{where}: '{key}' needs text 'content' and/or a list of 'tool_calls'")
    if not content.strip() and not calls:
        raise ContractError(f"{where}: '{key}' is empty: no text and no tool call")
    if calls:
        parsed = parse_tool_calls({"tool_calls": calls})
        if not parsed.ok or len(parsed.calls) != len(calls):
            raise ContractError(f"{where}: '{key}' has a tool call that cannot be read: {parsed.error or 'no name'}")
    return dict(message)


def _same_answer(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    def key(message: Mapping[str, Any]) -> str:
        calls = parse_tool_calls({"tool_calls": message.get("tool_calls")}).calls if message.get("tool_calls") else []
        return json.dumps([(message.get("content") or "").strip(), [call.to_json() for call in calls]], sort_keys=True)

    return key(first) == key(second)


@dataclass(frozen=True)
class PairFiles:
    """The pairs read from pair files, in order, and the lines skipped on the way."""

    pairs: list[PreferencePair]
    skipped: list[SkippedLine] = field(default_factory=list)


def read_pair_files(paths: Sequence[str], *, strict: bool) -> PairFiles:
    """The preference pairs in JSONL files; a bad line is a SpecError when `strict`, else skipped and listed.

    A missing file is a SpecError either way, and so are files that hold no usable pair.
    """
    pairs, skipped = read_jsonl(paths, pair_from_line, strict=strict, empty="no usable preference pair",
                               file="preference pair file")
    return PairFiles(pairs, skipped)


def pair_from_line(line: str) -> PreferencePair:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        raise ContractError(f"invalid JSON: {error.msg}") from None
    if not isinstance(data, dict):
        raise ContractError(f"a preference pair must be a JSON object, got {type(data).__name__}")
    return PreferencePair.from_json(data)
