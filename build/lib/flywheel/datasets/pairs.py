"""Preference pairs as lines of TRL's conversational preference format, and the messages they are made of.

One JSON object a line, what `trainer/dpo.py` reads and TRL's `DPOTrainer` takes:
`{"id", "prompt": [messages], "chosen": [assistant message], "rejected": [assistant message],
"tools": [OpenAI function schemas]}` (`tools` only where the agent offers tools). Tool calls are in
OpenAI's shape with their arguments as objects, as TRL's chat templates render them:
`{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name", "arguments": {}}}]}`.
The split is not in the line: a snapshot's file is named after it (`pairs_train.jsonl`,
`pairs_heldout.jsonl`). Reads only; `services` stores pairs.
"""

from __future__ import annotations

import json
from typing import Any

from flywheel.datasets.models import PreferencePair, Split

LINE_KEYS = ("id", "prompt", "chosen", "rejected", "tools")


def call_message(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The assistant message making one tool call."""
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}  # fmt: skip


def text_message(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _arguments(value: Any) -> Any:
    """Recorded arguments as an object; a string that is not a JSON object stays as it was sent."""
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if isinstance(parsed, dict) else value


def trl_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as TRL's templates take it: text content never null, call arguments as objects.

    A call's id is dropped (templates do not render it); a tool result keeps the id it answers.
    """
    out: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"type": "function", "function": {"name": call["function"]["name"],
                                              "arguments": _arguments(call["function"].get("arguments"))}}
            for call in message["tool_calls"]
        ]  # fmt: skip
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return out


def pair_line(pair: PreferencePair) -> dict[str, Any]:
    """The pair as one line of the preference file."""
    line: dict[str, Any] = {"id": str(pair.pk), "prompt": pair.prompt, "chosen": pair.chosen,
                            "rejected": pair.rejected}  # fmt: skip
    if pair.tools:
        line["tools"] = pair.tools
    return line


def pairs_file_name(split: str) -> str:
    """`pairs_train.jsonl` or `pairs_heldout.jsonl`: the split a file's pairs belong to, in its name."""
    if split not in Split.values:
        raise ValueError(f"split must be train or heldout, not {split!r}")
    return f"pairs_{split}.jsonl"
