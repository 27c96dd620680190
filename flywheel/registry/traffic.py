"""What the chat endpoint served, as a record the ingest path stores: the served-traffic half of the loop.

`served_record` turns one exchange (the request's messages and tools, the answer, its version
and adapter hash, latency and usage) into an `openai-chat` record whose id is the answer's id, so
storing it twice stores it once. `recorded_stream` passes a streamed answer's server-sent events
through untouched and assembles the answer (text and tool calls) for the record once the stream
ends. Pure: nothing here touches the database or the broker (`services.served_record_later` does).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flywheel.ingest.services import SERVED_SOURCE

logger = logging.getLogger(__name__)
FORMAT = "openai-chat"
SOURCE = SERVED_SOURCE  # the dedup namespace of recorded answers' ids, apart from what agents send


@dataclass(frozen=True)
class Served:
    """Who answered: the version's tag and the adapter's sha256."""

    tag: str
    adapter_sha256: str


def served_record(*, served: Served, body: dict[str, Any], answer: dict[str, Any], duration_ms: int,
                  exchange_id: str) -> dict[str, Any]:  # fmt: skip
    """The `openai-chat` record of one answered request; its outcome is left unknown for scoring to decide."""
    choice = (answer.get("choices") or [{}])[0]
    message = {key: value for key, value in (choice.get("message") or {}).items()
               if key in ("role", "content", "tool_calls")}  # fmt: skip
    record: dict[str, Any] = {
        "id": answer.get("id") or exchange_id,
        "model_version": served.tag,
        "messages": [*body["messages"], {"role": "assistant", **message}],
        "duration_ms": duration_ms,
        "metadata": {"served": {"adapter_sha256": served.adapter_sha256, "finish_reason": choice.get("finish_reason")}},
    }
    if isinstance(answer.get("usage"), dict):
        record["usage"] = answer["usage"]
    if isinstance(body.get("tools"), list):
        record["tools"] = body["tools"]
    return record


@dataclass
class StreamAssembly:
    """A streamed answer put back together from its chunks: id, text, tool calls (by index), usage."""

    id: str = ""
    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        self.id = self.id or str(chunk.get("id") or "")
        self.usage = chunk["usage"] if isinstance(chunk.get("usage"), dict) else self.usage
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue  # the record keeps the first choice, as for a whole answer
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                self._add_call(call)

    def _add_call(self, call: dict[str, Any]) -> None:
        # The first delta of a call carries its id and name; later ones carry pieces of the arguments.
        held = self.tool_calls.setdefault(call.get("index", 0), {"id": "", "type": "function",
                                                                  "function": {"name": "", "arguments": ""}})
        held["id"] = held["id"] or call.get("id") or ""
        function = call.get("function") or {}
        held["function"]["name"] += function.get("name") or ""
        held["function"]["arguments"] += function.get("arguments") or ""

    def answer(self) -> dict[str, Any]:
        """The answer as a whole (non-streamed) response would have carried it."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[index] for index in sorted(self.tool_calls)]
        answer: dict[str, Any] = {"id": self.id, "choices": [{"index": 0, "message": message,
                                                              "finish_reason": self.finish_reason}]}
        if self.usage is not None:
            answer["usage"] = self.usage
        return answer


def recorded_stream(lines: Iterator[bytes], on_end: Callable[..., object]) -> Iterator[bytes]:
    """`lines` as they come; once they end, `on_end(answer=...)` with the assembled answer.

    A stream the client abandons (the generator closed early) is not recorded: its answer is partial.
    """
    assembly = StreamAssembly()
    for line in lines:
        if line.startswith(b"data: {"):
            try:
                assembly.add(json.loads(line[len(b"data: "):]))
            except (ValueError, AttributeError, TypeError):
                logger.warning("a streamed chunk could not be read for the record", exc_info=True)
        yield line
    on_end(answer=assembly.answer())
