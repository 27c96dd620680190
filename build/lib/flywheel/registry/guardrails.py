"""Guardrails on served answers: the agent's safety policy judges every tool call the model returns, before the client.

Per rule, the agent's settings (`flywheel.triage.guardrails`) say block, flag or off:
- block: the client gets the assistant message without its tool calls, its content (and OpenAI's
  `refusal` field) naming the rule and the call, and `finish_reason: "stop"`, as OpenAI answers
  its own refusals. Not `content_filter`: on it the `openai` package's `parse` and `stream`
  helpers raise (ContentFilterFinishReasonError), so the client would get an exception where it
  should read the refusal and carry on. Every call of that choice is withheld, not only the one
  that broke the rule: an answer's calls are one plan (a lookup feeding a delete, a confirmation
  before a payment), and running part of it is something the model never proposed;
- flag: the answer goes out unchanged.
Either way the answer says what was done under `flywheel.guardrail`, and the served record keeps
the original calls with the verdict (`Verdict.record_metadata`), so triage sees the unsafe action.
The checks count the calls the assistant made earlier in the request's messages as history, so a
confirmation made in an earlier turn meets a confirmation rule.

When a check cannot run (a stored policy or setting that no longer parses, a bug), no response
fails: the answer's calls are withheld where the settings block any rule (fail closed, the
refusal naming `guardrail-error`: the operator asked for calls like these never to reach the
client, and an unchecked call might be one) and pass where they only flag (fail open, the
record saying `error`). An answer without tool calls is never touched.

Streams (`StreamGuard`): text deltas pass as they come; tool-call deltas are held until their
choice finishes (its finish_reason, `[DONE]`, or the end of the stream), then checked and
released whole (one delta per call) or replaced by the refusal.

Pure: no database. Not covered: a served record keeps the first choice only, so with `n` > 1 a
call blocked in another choice is withheld from the client but not recorded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flywheel.triage.guardrails import BLOCK, OFF, GuardrailSettings
from trainer.contracts import ToolCall
from trainer.verifiers.safety import SafetyPolicy, check_calls

logger = logging.getLogger(__name__)
ERROR_RULE = "guardrail-error"
BLOCKED, FLAGGED, ERROR = "blocked", "flagged", "error"
BLOCKED_FINISH = "stop"


@dataclass(frozen=True)
class Guardrails:
    """An agent's policy and per-rule actions; `broken` says why the stored ones could not be read."""

    policy: SafetyPolicy
    settings: GuardrailSettings
    broken: str = ""

    @classmethod
    def from_stored(cls, policy: Any, settings: Any) -> Guardrails:
        """From the stored JSON (policy None: the default policy); never raises."""
        try:
            parsed = SafetyPolicy.from_json(policy) if policy is not None else SafetyPolicy.default()
            return cls(parsed, GuardrailSettings.from_json(settings))
        except Exception as error:  # stored before a change of format, or edited around the service
            logger.warning("the stored guardrails cannot be read; served tool calls fail closed", exc_info=True)
            return cls.unreadable(str(error) or repr(error))

    @classmethod
    def unreadable(cls, reason: str) -> Guardrails:
        """Guardrails whose settings could not be read: every answer's calls fail closed."""
        return cls(SafetyPolicy.default(), GuardrailSettings(default=BLOCK), broken=reason)

    @property
    def off(self) -> bool:
        return not self.broken and self.settings.off

    @property
    def fails_closed(self) -> bool:
        """Whether calls are withheld when they cannot be checked: settings that block, or that could not be read."""
        return bool(self.broken) or self.settings.blocks_any


@dataclass(frozen=True)
class Finding:
    """A rule a returned call broke, and what the settings did about it."""

    rule: str
    action: str  # block or flag
    tool: str
    call_index: int  # in its choice's tool_calls; -1 for the whole answer
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "action": self.action, "tool": self.tool, "call": self.call_index,
                "detail": self.detail}  # fmt: skip


@dataclass(frozen=True)
class ChoiceVerdict:
    """The judgement of one choice's calls; `error` when the check could not run."""

    findings: tuple[Finding, ...] = ()
    error: str = ""

    @property
    def blocked(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.action == BLOCK]

    @property
    def outcome(self) -> str:
        """blocked, flagged, error, or "" for calls that broke no checked rule."""
        if self.blocked:
            return BLOCKED
        return FLAGGED if self.findings else ERROR if self.error else ""


CLEAN = ChoiceVerdict()


@dataclass(frozen=True)
class Verdict:
    """The judgement of an answer, per choice index."""

    choices: Mapping[int, ChoiceVerdict] = field(default_factory=dict)

    def of(self, index: int) -> ChoiceVerdict:
        return self.choices.get(index, CLEAN)

    @property
    def clean(self) -> bool:
        return not any(verdict.outcome for verdict in self.choices.values())

    def summary(self) -> dict[str, Any]:
        """What the answer tells its client under `flywheel.guardrail`."""
        return {str(index): {"action": verdict.outcome, "rules": _rules(verdict.findings)}
                for index, verdict in sorted(self.choices.items()) if verdict.outcome}  # fmt: skip

    def record_metadata(self) -> dict[str, Any]:
        """The served record's metadata for the first choice (the one a record keeps); {} when clean."""
        verdict = self.of(0)
        if not verdict.outcome:
            return {}
        metadata: dict[str, Any] = {
            "guardrail": verdict.outcome,
            "guardrail_rules": _rules(verdict.findings),
            "guardrail_findings": [finding.to_json() for finding in verdict.findings],
        }
        if verdict.error:
            metadata["guardrail_error"] = verdict.error[:500]
        return metadata


def _rules(findings: Iterable[Finding]) -> list[str]:
    return list(dict.fromkeys(finding.rule for finding in findings))


def _call(item: Any) -> ToolCall:
    """An OpenAI tool call as the policy reads it; arguments that are not a JSON object are one string argument,
    so the argument patterns still see them."""
    function = item["function"]
    name, raw = function["name"], function.get("arguments") or "{}"
    if not isinstance(name, str):
        raise ValueError("a tool call without a function name")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    return ToolCall(name, arguments if isinstance(arguments, dict) else {"arguments": str(raw)})


def history_of(messages: Any) -> list[ToolCall]:
    """The tool calls the assistant made in the request's messages, in order; unreadable ones skipped."""
    calls: list[ToolCall] = []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "assistant":
            for item in message.get("tool_calls") or []:
                try:
                    calls.append(_call(item))
                except (KeyError, TypeError, ValueError):
                    continue  # the client's history: a bad entry there is no call of this answer
    return calls


def judge(guardrails: Guardrails, tool_calls: Any, history: Sequence[ToolCall]) -> ChoiceVerdict:
    """The verdict on one choice's `tool_calls` (OpenAI form); never raises."""
    if not tool_calls or guardrails.off:
        return CLEAN
    try:
        if guardrails.broken:
            raise ValueError(f"the agent's guardrails cannot be read: {guardrails.broken}")
        calls = [_call(item) for item in tool_calls]
        found = []
        for violation in check_calls(guardrails.policy, calls, history):
            action = guardrails.settings.action(violation.rule_id)
            if action != OFF:
                found.append(Finding(violation.rule_id, action, violation.tool, violation.call_index, violation.detail))
        return ChoiceVerdict(tuple(found))
    except Exception as error:  # never the client's error: fail closed or open, as the module says
        logger.warning("the guardrails could not check a served answer", exc_info=True)
        message = str(error) or repr(error)
        if guardrails.fails_closed:
            withheld = Finding(ERROR_RULE, BLOCK, "", -1, f"the guardrails could not check the calls: {message}")
            return ChoiceVerdict((withheld,), error=message)
        return ChoiceVerdict(error=message)


def refusal_text(blocked: Sequence[Finding]) -> str:
    reasons = "; ".join(f"{finding.tool or 'the answer'} broke rule {finding.rule} ({finding.detail})"
                        for finding in blocked)  # fmt: skip
    return f"Blocked by the agent's guardrails: {reasons}. None of this answer's tool calls were returned."


def check_answer(guardrails: Guardrails, messages: Any, answer: dict[str, Any]) -> Verdict:
    """The verdict on every choice of a whole answer; never raises."""
    if guardrails.off:
        return Verdict()
    history = history_of(messages)
    verdicts: dict[int, ChoiceVerdict] = {}
    for position, choice in enumerate(answer.get("choices") or []):
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if calls:
            verdicts[choice.get("index", position)] = judge(guardrails, calls, history)
    return Verdict(verdicts)


def guarded_answer(answer: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """The answer the client gets: blocked choices' calls replaced by the refusal; `answer` itself is left as is."""
    if verdict.clean:
        return answer
    choices = []
    for position, choice in enumerate(answer.get("choices") or []):
        blocked = verdict.of(choice.get("index", position)).blocked
        if blocked:
            text = refusal_text(blocked)
            choice = {**choice, "finish_reason": BLOCKED_FINISH,
                      "message": {"role": "assistant", "content": text, "refusal": text}}  # fmt: skip
        choices.append(choice)
    extension = {**(answer.get("flywheel") or {}), "guardrail": verdict.summary()}
    return {**answer, "choices": choices, "flywheel": extension}


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n"


def call_delta_merge(calls: dict[int, dict[str, Any]], delta: dict[str, Any]) -> None:
    """Add one streamed tool-call delta to the calls assembled so far, by its index.

    The first delta of a call carries its id and name; later ones carry pieces of the arguments.
    """
    held = calls.setdefault(delta.get("index", 0), {"id": "", "type": "function",
                                                    "function": {"name": "", "arguments": ""}})  # fmt: skip
    held["id"] = held["id"] or delta.get("id") or ""
    function = delta.get("function") or {}
    held["function"]["name"] += function.get("name") or ""
    held["function"]["arguments"] += function.get("arguments") or ""


class StreamGuard:
    """Holds a stream's tool-call deltas until their choice is complete, then releases or refuses them.

    `feed` takes each server-sent line (and its decoded chunk, when it is one) and returns the
    lines to send on; `flush` settles what is still held when the stream ends. `verdict` is the
    judgement so far, whole once the stream has ended.
    """

    def __init__(self, guardrails: Guardrails, history: Sequence[ToolCall]) -> None:
        self.guardrails, self.history = guardrails, history
        self._held: dict[int, dict[int, dict[str, Any]]] = {}
        self._verdicts: dict[int, ChoiceVerdict] = {}
        self._texted: set[int] = set()  # choices whose text has already gone out
        self._envelope: dict[str, Any] = {}  # id, model... of the last chunk, for the chunks `flush` makes

    @property
    def verdict(self) -> Verdict:
        return Verdict(dict(self._verdicts))

    def feed(self, line: bytes, chunk: dict[str, Any] | None) -> list[bytes]:
        try:
            if line.startswith(b"data: [DONE]"):
                return [*self.flush(), line]
            if chunk is None or not chunk.get("choices"):
                return [line]
            return self._chunk(line, chunk)
        except Exception:  # never the client's error; a line with calls in it passes only where the rules only flag
            logger.warning("the guardrails could not read a streamed chunk", exc_info=True)
            if b'"tool_calls"' in line and self.guardrails.fails_closed:
                self._verdicts[0] = ChoiceVerdict((Finding(ERROR_RULE, BLOCK, "", -1, "a chunk could not be read"),),
                                                  error="a streamed chunk could not be read")  # fmt: skip
                return []
            return [line]

    def _chunk(self, line: bytes, chunk: dict[str, Any]) -> list[bytes]:
        self._envelope = {key: chunk[key] for key in ("id", "object", "created", "model") if key in chunk}
        choices, changed = [], False
        for choice in chunk["choices"]:
            kept = self._choice(choice)
            changed = changed or kept is not choice
            if kept is not None:
                choices.append(kept)
        if not changed:
            return [line]
        return [_event({**chunk, "choices": choices})] if choices else []

    def _choice(self, choice: dict[str, Any]) -> dict[str, Any] | None:
        """The choice to send on: without held call pieces, settled when it finishes; None when nothing is left."""
        index = choice.get("index", 0)
        delta = choice.get("delta") or {}
        if delta.get("content"):
            self._texted.add(index)
        if delta.get("tool_calls") and not self.guardrails.off:
            for call in delta["tool_calls"]:
                call_delta_merge(self._held.setdefault(index, {}), call)
            delta = {key: value for key, value in delta.items() if key != "tool_calls"}
            choice = {**choice, "delta": delta}
            if not delta and not choice.get("finish_reason"):
                return None
        if choice.get("finish_reason") and index in self._held:
            return self._settled(index, choice)
        return choice

    def _settled(self, index: int, choice: dict[str, Any]) -> dict[str, Any]:
        held = self._held.pop(index)
        calls = [held[position] for position in sorted(held)]
        verdict = self._verdicts[index] = judge(self.guardrails, calls, self.history)
        delta = dict(choice.get("delta") or {})
        if verdict.blocked:
            text = refusal_text(verdict.blocked)
            delta["content"] = (delta.get("content") or "") + ("\n\n" if index in self._texted else "") + text
            delta["refusal"] = text
            return {**choice, "delta": delta, "finish_reason": BLOCKED_FINISH}
        delta["tool_calls"] = [{"index": position, **call} for position, call in sorted(held.items())]
        return {**choice, "delta": delta}

    def flush(self) -> list[bytes]:
        """Settle the choices whose calls are still held (the stream ended without their finish_reason)."""
        lines = []
        for index in sorted(self._held):
            choice = self._settled(index, {"index": index, "delta": {}, "finish_reason": None})
            lines += [_event({**self._envelope, "choices": [choice]}), b"\n"]
        return lines
