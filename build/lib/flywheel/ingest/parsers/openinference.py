"""OpenInference spans (Phoenix's conventions) read as the GenAI spans `parsers.otlp` assembles.

`openinference-instrumentation-openai` and its siblings flatten each message into attributes:
`llm.input_messages.<i>.message.role`, `.message.content` (or `.message.contents.<j>.message_content.text`),
`.message.tool_calls.<j>.tool_call.{id, function.name, function.arguments}`, `.message.tool_call_id`;
likewise `llm.output_messages.*`, with `llm.tools.<i>.tool.json_schema`, `llm.token_count.*`,
`llm.model_name` (the response's model), and the raw request and answer in `input.value` and
`output.value`. `genai_attributes` turns an `LLM` span's attributes into `gen_ai.*` ones (messages
as `{role, parts}` lists, the answer's `id` as `gen_ai.response.id`) and a `TOOL` span's into an
`execute_tool` span's; what it does not read is passed through for the step's metadata. Spans of
other kinds (CHAIN, AGENT, ...) and spans that are not OpenInference are returned unchanged.

It does not read retrieval, embedding or reranker spans, images or audio parts, or prompt templates.
"""

from __future__ import annotations

import re
from typing import Any

from flywheel.ingest.parsers.base import RecordError, text_from
from flywheel.ingest.reader import decode_value

KIND = "openinference.span.kind"
INDEXED = re.compile(r"([0-9]{1,6})\.(.+)")
JSON_DEPTH = 64
CONSUMED_PREFIXES = ("llm.input_messages.", "llm.output_messages.", "llm.tools.", "llm.token_count.")
CONSUMED = {KIND, "input.value", "input.mime_type", "output.value", "output.mime_type", "llm.model_name",
            "llm.request.model_name", "llm.response.model_name", "tool.name", "tool.id", "tool.parameters"}  # fmt: skip


def genai_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """The span's attributes in GenAI form when it is an OpenInference LLM or TOOL span; else as they are."""
    kind = attributes.get(KIND)
    if kind == "LLM":
        return {**_unread(attributes), **_llm(attributes)}
    if kind == "TOOL":
        return {**_unread(attributes), **_tool(attributes)}
    return attributes


def _unread(attributes: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items()
            if key not in CONSUMED and not key.startswith(CONSUMED_PREFIXES)}  # fmt: skip


def _llm(attributes: dict[str, Any]) -> dict[str, Any]:
    answer = _json_or_none(attributes, "output.value", "output.mime_type")
    request = _json_or_none(attributes, "input.value", "input.mime_type")
    converted: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": [_message(m) for m in _indexed(attributes, "llm.input_messages.").values()],
        "gen_ai.output.messages": [_message(m) for m in _indexed(attributes, "llm.output_messages.").values()],
        "gen_ai.usage.input_tokens": attributes.get("llm.token_count.prompt"),
        "gen_ai.usage.output_tokens": attributes.get("llm.token_count.completion"),
        "gen_ai.response.model": attributes.get("llm.response.model_name") or attributes.get("llm.model_name"),
        "gen_ai.request.model": attributes.get("llm.request.model_name")
        or (request.get("model") if isinstance(request, dict) else None),
        "gen_ai.response.id": answer.get("id") if isinstance(answer, dict) else None,
    }
    tools = [_json_value(tool, "tool.json_schema") for tool in _indexed(attributes, "llm.tools.").values()]
    if tools:
        converted["gen_ai.tool.definitions"] = tools
    return {key: value for key, value in converted.items() if value not in (None, "")}


def _tool(attributes: dict[str, Any]) -> dict[str, Any]:
    converted = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": attributes.get("tool.name"),
        "gen_ai.tool.call.id": attributes.get("tool.id"),
        "gen_ai.tool.call.arguments": attributes.get("tool.parameters") or attributes.get("input.value"),
        "gen_ai.tool.call.result": attributes.get("output.value"),
    }
    return {key: value for key, value in converted.items() if value not in (None, "")}


def _indexed(attributes: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix<i>.<rest>` keys gathered into one dict of `rest` per index, in index order."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix) and (match := INDEXED.fullmatch(key[len(prefix) :])):
            found.setdefault(int(match[1]), {})[match[2]] = value
    return dict(sorted(found.items()))


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    """One OpenInference message (its `message.*` keys) as a GenAI `{role, parts}` message."""
    role = str(flat.get("message.role") or "")
    texts = [flat["message.content"]] if flat.get("message.content") not in (None, "") else []
    for content in _indexed(flat, "message.contents.").values():
        if content.get("message_content.type", "text") == "text" and content.get("message_content.text"):
            texts.append(content["message_content.text"])
    if role == "tool":
        response = "\n".join(text_from(text) for text in texts)
        return {"role": role, "parts": [{"type": "tool_call_response", "id": flat.get("message.tool_call_id") or "",
                                         "response": response}]}  # fmt: skip
    parts: list[dict[str, Any]] = [{"type": "text", "content": text_from(text)} for text in texts]
    for call in _indexed(flat, "message.tool_calls.").values():
        parts.append({"type": "tool_call", "id": call.get("tool_call.id") or "",
                      "name": call.get("tool_call.function.name") or "",
                      "arguments": call.get("tool_call.function.arguments")})  # fmt: skip
    if flat.get("message.function_call_name"):  # OpenAI's older `function_call`
        parts.append({"type": "tool_call", "id": "", "name": flat["message.function_call_name"],
                      "arguments": flat.get("message.function_call_arguments_json")})  # fmt: skip
    return {"role": role, "parts": parts}


def _json_value(attributes: dict[str, Any], name: str) -> Any:
    value = attributes.get(name)
    if not isinstance(value, str):
        return value
    decoded, problem = decode_value(value, JSON_DEPTH)
    if problem:
        raise RecordError(f"span attribute {name} is not valid JSON: {problem}")
    return decoded


def _json_or_none(attributes: dict[str, Any], name: str, mime: str) -> Any:
    """The raw request or answer (`input.value`, `output.value`) when it is JSON; None when it is not."""
    value = attributes.get(name)
    if attributes.get(mime) != "application/json" or not isinstance(value, str):
        return None
    decoded, problem = decode_value(value, JSON_DEPTH)
    return None if problem else decoded
