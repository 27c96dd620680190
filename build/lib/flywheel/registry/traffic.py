"""What the chat endpoint served, as a record the ingest path stores: the served-traffic half of the loop.

`served_record` turns one exchange (the request's messages and tools, the answer, its version
and adapter hash, latency, usage and cost) into an `openai-chat` record whose id is the answer's
id, so storing it twice stores it once. The record keeps the answer as the model gave it: where
the guardrails blocked its calls, the calls, the rules, `guardrail: blocked` and the outcome
failure (what triage lists as an unsafe action); where they flagged them, the rules and
`guardrail: flagged`. `recorded_stream` passes a streamed answer's server-sent events through
(through the guardrails' `StreamGuard` where they are on) and assembles the answer as the server
sent it (text and tool calls) for the record once the stream ends. Pure: nothing here touches the
database or the broker (`services.served_record_later` does).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flywheel.ingest.services import SERVED_SOURCE
from flywheel.registry.guardrails import BLOCKED, StreamGuard, Verdict, call_delta_merge

logger = logging.getLogger(__name__)
FORMAT = "openai-chat"
SOURCE = SERVED_SOURCE  # the dedup namespace of recorded answers' ids, apart from what agents send


@dataclass(frozen=True)
class Served:
    """Who answered: the version's tag and the adapter's sha256."""

    tag: str
    adapter_sha256: str


@dataclass(frozen=True)
class Prices:
    """An agent's prices in its currency per million input (prompt) and output (completion) tokens."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0


NO_PRICES = Prices()


def served_cost(usage: Any, prices: Prices) -> float | None:
    """What the answer cost by its reported usage; None when it reports no token counts to price."""
    if not isinstance(usage, dict):
        return None
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    if prompt is None and completion is None:
        return None
    return ((prompt or 0) * prices.input_per_million + (completion or 0) * prices.output_per_million) / 1_000_000


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def served_record(*, served: Served, body: dict[str, Any], answer: dict[str, Any], duration_ms: int, exchange_id: str,
                  verdict: Verdict | None = None, prices: Prices = NO_PRICES) -> dict[str, Any]:  # fmt: skip
    """The `openai-chat` record of one answered request, as the server answered it.

    Its outcome is failure where the guardrails blocked the answer's calls (the client got a
    refusal), else left unknown for scoring to decide.
    """
    choice = (answer.get("choices") or [{}])[0]
    message = {key: value for key, value in (choice.get("message") or {}).items()
               if key in ("role", "content", "tool_calls")}  # fmt: skip
    guardrail = verdict.record_metadata() if verdict is not None else {}
    record: dict[str, Any] = {
        "id": answer.get("id") or exchange_id,
        "model_version": served.tag,
        "messages": [*body["messages"], {"role": "assistant", **message}],
        "duration_ms": duration_ms,
        "metadata": {"served": {"adapter_sha256": served.adapter_sha256, "finish_reason": choice.get("finish_reason")},
                     **guardrail},
    }
    if guardrail.get("guardrail") == BLOCKED:
        record["outcome"] = "failure"
    if isinstance(answer.get("usage"), dict):
        record["usage"] = answer["usage"]
    cost = served_cost(answer.get("usage"), prices)
    if cost is not None:
        record["cost"] = cost
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
                call_delta_merge(self.tool_calls, call)

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


def recorded_stream(lines: Iterator[bytes], on_end: Callable[..., object],
                    guard: StreamGuard | None = None) -> Iterator[bytes]:  # fmt: skip
    """`lines` as they come (as `guard` lets them through, where given); once they end, `on_end(answer=...,
    verdict=...)` with the answer as the server sent it and the guard's verdict (None without one).

    A stream the client abandons (the generator closed early) is not recorded: its answer is partial.
    """
    assembly = StreamAssembly()
    for line in lines:
        chunk = None
        if line.startswith(b"data: {"):
            try:
                chunk = json.loads(line[len(b"data: "):])
                assembly.add(chunk)
            except (ValueError, AttributeError, TypeError):
                logger.warning("a streamed chunk could not be read for the record", exc_info=True)
        if guard is None:
            yield line
        else:
            yield from guard.feed(line, chunk if isinstance(chunk, dict) else None)
    if guard is not None:
        yield from guard.flush()
    on_end(answer=assembly.answer(), verdict=guard.verdict if guard is not None else None)
