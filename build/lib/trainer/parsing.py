"""Turn what a model emitted into tool calls, tolerating the shapes real models produce.

Accepted: a JSON call object (`{"tool", "args"}` as in the guide, `{"name", "arguments"}`,
OpenAI `{"function": {...}}` with JSON-string arguments, Responses-API `function_call`
items, Anthropic `tool_use` blocks, BFCL's `{"fn": {args}}`), a list of them,
`{"tool_calls": [...]}`, `<tool_call>...</tool_call>` tags, JSON or Python in a code fence,
Python call syntax (`calendar.create_event(attendee="Alex")`, `[f(a=1), g(b=2)]`, and
WorkBench's `name.func(...)`), and a call object or call line inside prose.
Python is read with `ast` and only literal values are taken; nothing is evaluated.
`ParseResult.json` says whether the calls were written as JSON: every call block (the whole
output, each `<tool_call>` tag, each code fence, or each call object found in prose) was
well-formed JSON; Python call syntax is not JSON, and neither is an output that opens as a call
block, fails to parse, and yields calls only from the prose search.

A failure says why, with a kind a verifier can act on (no call found, invalid JSON at a
position, unsupported syntax, a malformed call, too large, too deep). Matching calls
against a task is not done here (see `trainer.verifiers`).
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from trainer.contracts import ToolCall

MAX_OUTPUT_CHARS = 1_000_000
MAX_NESTING = 64
MAX_PROSE_CANDIDATES = 64

NO_CALL = "no_call"
INVALID_JSON = "invalid_json"
UNSUPPORTED_SYNTAX = "unsupported_syntax"
INVALID_CALL = "invalid_call"
TOO_LARGE = "too_large"
TOO_DEEP = "too_deep"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_TOOL_CALL_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_CODE_FENCE = re.compile(r"```[ \t]*([\w-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_CALL_LINE = re.compile(r"^\s*\[?\s*[A-Za-z_][\w.]*\(")
_NAME_KEYS = ("name", "tool", "tool_name", "function", "function_name")
_ARGUMENT_KEYS = ("arguments", "args", "parameters", "input", "kwargs")
_SKIPPED_ITEM_TYPES = frozenset({"message", "reasoning", "text", "output_text", "function_call_output"})
_JSON_NAMES = {"true": True, "false": False, "null": None}


@dataclass(frozen=True)
class ParseResult:
    """The calls found, or why none could be read (`error` and its `error_kind`).

    `syntax` is where the calls were found; `json` whether every call block was well-formed JSON.
    """

    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    syntax: str = ""
    json: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


class _ParseFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_tool_calls(output: object) -> ParseResult:
    """Read the tool calls in a model's output: raw text or an already-decoded JSON value."""
    try:
        if isinstance(output, str):
            return _parse_text(output)
        if isinstance(output, (dict, list)):
            return ParseResult(calls=_checked(_calls_from_json(output, 0)), syntax="structured", json=True)
        if output is None:
            return ParseResult(error="no tool call found: the output is empty", error_kind=NO_CALL)
        raise _ParseFailure(UNSUPPORTED_SYNTAX, f"the output is a {type(output).__name__}, not text or JSON")
    except _ParseFailure as failure:
        return ParseResult(error=str(failure), error_kind=failure.kind)
    except (RecursionError, MemoryError):
        return ParseResult(error="the output is nested too deeply to read", error_kind=TOO_DEEP)


def _parse_text(text: str) -> ParseResult:
    if len(text) > MAX_OUTPUT_CHARS:
        raise _ParseFailure(TOO_LARGE, f"the output is {len(text)} characters, over the {MAX_OUTPUT_CHARS} limit")
    if "think>" in text:
        text = _without_reasoning(text)
    text = text.strip()
    if not text:
        return ParseResult(error="no tool call found: the output is empty", error_kind=NO_CALL)
    tagged = _TOOL_CALL_TAG.findall(text) if "<tool_call>" in text else []
    if tagged:
        calls, all_json = _calls_from_blocks(tagged)
        return ParseResult(calls=calls, syntax="tool_call_tag", json=all_json)
    fenced = (
        [body for language, body in _CODE_FENCE.findall(text) if _is_code_language(language)] if "```" in text else []
    )
    if fenced:
        calls, all_json = _calls_from_blocks(fenced)
        return ParseResult(calls=calls, syntax="code_fence", json=all_json)
    if text[0] in "{[" or _CALL_LINE.match(text):
        return _parse_whole(text)
    return _parse_prose(text)


def _parse_whole(text: str) -> ParseResult:
    """Text that opens like a call: read all of it, else look for calls inside it."""
    try:
        calls, syntax = _calls_from_candidate(text)
    except _ParseFailure as failure:
        # A call followed by a remark still counts; otherwise the first error is the answer.
        found = _parse_prose(text) if "\n" in text else ParseResult()
        if found.calls:
            return replace(found, json=False)  # the call block it opened with is malformed
        raise failure from None
    return ParseResult(calls=calls, syntax=syntax, json=syntax == "json")


def _without_reasoning(text: str) -> str:
    # Reasoning models think aloud before answering; drafts in the thinking are not the answer.
    text = _THINK_BLOCK.sub("", text)
    return text.rsplit("</think>", 1)[-1]


def _is_code_language(language: str) -> bool:
    return language.lower() in ("", "json", "jsonl", "python", "py", "tool_call", "tool_code")


def _calls_from_blocks(blocks: list[str]) -> tuple[list[ToolCall], bool]:
    """The calls of every block, and whether every block was JSON; one unreadable block fails them all."""
    calls: list[ToolCall] = []
    all_json = True
    for block in blocks:
        if block.strip():
            found, syntax = _calls_from_candidate(block.strip())
            calls.extend(found)
            all_json = all_json and syntax == "json"
    return calls, all_json


def _calls_from_candidate(text: str) -> tuple[list[ToolCall], str]:
    """Read text that should be nothing but calls, as JSON (one value or lines) or Python."""
    if text[0] not in "{[":
        return _calls_from_python(text), "python"
    call_list = text[0] == "[" and _CALL_LINE.match(text) is not None
    if call_list:
        # BFCL's prompt format is a Python list of calls: [f(a=1), g(b=2)]. Tried first, being common.
        try:
            return _calls_from_python(text), "python"
        except _ParseFailure:
            pass
    try:
        return _checked(_calls_from_json(json.loads(text), 0)), "json"
    except json.JSONDecodeError as error:
        json_error = error
    lines = _json_lines(text)
    if lines is not None:
        return _checked(lines), "json"
    if text[0] == "[" and not call_list:
        # A Python list of call strings, as WorkBench stores its answers.
        try:
            return _calls_from_python(text), "python"
        except _ParseFailure:
            pass
    raise _ParseFailure(INVALID_JSON, f"invalid JSON at position {json_error.pos}: {json_error.msg}")


def _json_lines(text: str) -> list[ToolCall] | None:
    """Calls written one JSON object per line, or None when the text is not that."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    calls: list[ToolCall] = []
    for line in lines:
        try:
            calls.extend(_calls_from_json(json.loads(line), 0))
        except json.JSONDecodeError:
            return None
    return calls


def _parse_prose(text: str) -> ParseResult:
    calls: list[ToolCall] = []
    for value in _json_values_in(text):
        try:
            calls.extend(_calls_from_json(value, 0))
        except _ParseFailure:
            continue
    if calls:
        return ParseResult(calls=_checked(calls), syntax="prose_json", json=True)
    for line in text.splitlines():
        if _CALL_LINE.match(line):
            try:
                calls.extend(_calls_from_python(line.strip().rstrip(".;")))
            except _ParseFailure:
                continue
    if calls:
        return ParseResult(calls=calls, syntax="prose_python")
    return ParseResult(error="no tool call found in the output", error_kind=NO_CALL)


def _json_values_in(text: str) -> Iterator[Any]:
    """JSON objects embedded in prose, left to right, without overlapping."""
    decoder = json.JSONDecoder()
    position, tried = text.find("{"), 0
    while position != -1 and tried < MAX_PROSE_CANDIDATES:
        tried += 1
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            position = text.find("{", position + 1)
            continue
        yield value
        position = text.find("{", end)


def _checked(calls: list[ToolCall]) -> list[ToolCall]:
    """The calls read from JSON, refused when their arguments nest too deeply for the verifiers."""
    for call in calls:
        if _nesting_exceeds(call.arguments, MAX_NESTING):
            raise _ParseFailure(TOO_DEEP, f"the arguments of {call.name} nest deeper than {MAX_NESTING} levels")
    return calls


def _nesting_exceeds(value: Any, limit: int) -> bool:
    # Iterative, so that a hostile depth cannot exhaust the interpreter's stack here.
    stack = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(current, Mapping):
            stack.extend((child, depth + 1) for child in current.values())
        elif isinstance(current, (list, tuple)):
            stack.extend((child, depth + 1) for child in current)
    return False


# --- JSON shapes -------------------------------------------------------------------------


def _calls_from_json(value: Any, depth: int) -> list[ToolCall]:
    if depth > MAX_NESTING:
        raise _ParseFailure(TOO_DEEP, f"the output nests deeper than {MAX_NESTING} levels")
    if isinstance(value, list):
        calls: list[ToolCall] = []
        for index, item in enumerate(value):
            calls.extend(_calls_from_item(item, index, depth + 1))
        return calls
    if isinstance(value, dict):
        return _calls_from_object(value, depth + 1)
    raise _ParseFailure(INVALID_CALL, f"expected a call object or a list of calls, got a JSON {_json_type(value)}")


def _calls_from_item(item: Any, index: int, depth: int) -> list[ToolCall]:
    if isinstance(item, str):
        # A list of call strings, as WorkBench stores its answers.
        return _calls_from_python(item)
    if not isinstance(item, dict):
        raise _ParseFailure(INVALID_CALL, f"item {index} of the list is a JSON {_json_type(item)}, not a call")
    if item.get("type") in _SKIPPED_ITEM_TYPES:
        return []
    return _calls_from_object(item, depth)


def _calls_from_object(data: dict[str, Any], depth: int) -> list[ToolCall]:
    if "tool_calls" in data:
        tool_calls = data["tool_calls"]
        if tool_calls:
            return _calls_from_json(tool_calls, depth)
        return _calls_from_message_text(data)
    if isinstance(data.get("function_call"), dict):
        return [_call_from_parts(data["function_call"])]
    if isinstance(data.get("output"), list):
        return _calls_from_json(data["output"], depth)
    if isinstance(data.get("function"), dict):
        return [_call_from_parts(data["function"])]
    if any(isinstance(data.get(key), str) for key in _NAME_KEYS):
        return [_call_from_parts(data)]
    if "content" in data:
        return _calls_from_message_text(data)
    if len(data) == 1:
        name, arguments = next(iter(data.items()))
        if isinstance(arguments, dict):
            return [ToolCall(name=name, arguments=arguments)]
    keys = ", ".join(sorted(data)[:8]) or "none"
    raise _ParseFailure(INVALID_CALL, f"the JSON object is not a tool call: no tool name (keys: {keys})")


def _calls_from_message_text(message: dict[str, Any]) -> list[ToolCall]:
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        result = _parse_text(content)
        if result.error_kind not in (None, NO_CALL):
            raise _ParseFailure(result.error_kind or INVALID_CALL, result.error or "unreadable content")
        return result.calls
    return []


def _call_from_parts(data: Mapping[str, Any]) -> ToolCall:
    name = next((data[key] for key in _NAME_KEYS if isinstance(data.get(key), str)), None)
    if not name or not name.strip():
        raise _ParseFailure(INVALID_CALL, "a call has an empty tool name")
    raw = next((data[key] for key in _ARGUMENT_KEYS if key in data), None)
    return ToolCall(name=name.strip(), arguments=_arguments_object(name, raw))


def _arguments_object(name: str, raw: Any) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as error:
            raise _ParseFailure(
                INVALID_JSON, f"the arguments of {name} are invalid JSON at position {error.pos}: {error.msg}"
            ) from None
    if not isinstance(raw, dict):
        raise _ParseFailure(INVALID_CALL, f"the arguments of {name} are a JSON {_json_type(raw)}, not an object")
    return raw


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


# --- Python call syntax ------------------------------------------------------------------


def _calls_from_python(text: str) -> list[ToolCall]:
    fast = _read_plain_calls(text)
    return fast if fast is not None else _calls_from_python_ast(text)


def _calls_from_python_ast(text: str) -> list[ToolCall]:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        if "too many nested" in str(error.msg):
            raise _ParseFailure(TOO_DEEP, "the output nests too deeply to read") from None
        raise _ParseFailure(
            UNSUPPORTED_SYNTAX, f"not a JSON call nor a Python call: {error.msg} at column {error.offset}"
        ) from None
    body = tree.body
    if isinstance(body, ast.Call):
        return [_call_from_python(body, text)]
    if isinstance(body, (ast.List, ast.Tuple)) and all(isinstance(item, ast.Call) for item in body.elts):
        return [_call_from_python(cast(ast.Call, item), text) for item in body.elts]
    if isinstance(body, ast.List) and all(_is_string(item) for item in body.elts):
        # WorkBench stores its answers as a Python list of call strings.
        return [call for item in body.elts for call in _calls_from_python(item.value)]  # type: ignore[attr-defined]
    raise _ParseFailure(UNSUPPORTED_SYNTAX, f"expected a call such as name(arg=value), got {type(body).__name__}")


def _is_string(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _call_from_python(node: ast.Call, source: str) -> ToolCall:
    name = _dotted_name(node.func)
    if name.endswith(".func"):
        name = name[: -len(".func")]
    if node.args:
        raise _ParseFailure(UNSUPPORTED_SYNTAX, f"positional arguments in the call to {name}; use name=value")
    arguments: dict[str, Any] = {}
    for argument in node.keywords:
        if argument.arg is None:
            raise _ParseFailure(UNSUPPORTED_SYNTAX, f"**-unpacking in the call to {name}")
        arguments[argument.arg] = _literal(argument.value, source, 0)
    return ToolCall(name=name, arguments=arguments)


def _dotted_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise _ParseFailure(UNSUPPORTED_SYNTAX, f"the called object is a {type(node).__name__}, not a name")


def _literal(node: ast.expr, source: str, depth: int) -> Any:
    """The value a literal expression denotes; a few non-literals become their source text."""
    if depth > MAX_NESTING:
        raise _ParseFailure(TOO_DEEP, f"an argument nests deeper than {MAX_NESTING} levels")
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand, source, depth + 1)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.List):
        return [_literal(item, source, depth + 1) for item in node.elts]
    if isinstance(node, ast.Tuple):
        # Kept as a tuple: BFCL's strict mode tells tuples from lists; JSON output turns it into a list.
        return tuple(_literal(item, source, depth + 1) for item in node.elts)
    if isinstance(node, ast.Dict):
        return _dict_literal(node, source, depth)
    if isinstance(node, ast.Name):
        return _JSON_NAMES.get(node.id, node.id)
    if isinstance(node, (ast.Attribute, ast.Call, ast.Subscript, ast.Lambda)):
        # An expression such as math.pi or lambda x: x**2 is kept as the text the model wrote.
        return ast.get_source_segment(source.strip(), node) or ast.unparse(node)
    raise _ParseFailure(UNSUPPORTED_SYNTAX, f"{type(node).__name__} is not a literal value")


def _dict_literal(node: ast.Dict, source: str, depth: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise _ParseFailure(UNSUPPORTED_SYNTAX, "a dictionary key is not a string")
        result[key.value] = _literal(value, source, depth + 1)
    return result


# --- a fast reader for the plain call lists most outputs are -------------------------------
# Scoring is on the training hot path and `ast.parse` dominates it. Plain outputs such as
# [f(a=1, b='x', c=[1.5, True])] are read here in one pass; anything else, or anything
# doubtful (escapes, prefixes, expressions, repeated keywords), returns None and takes the
# `ast` path, which decides. Both must give the same calls; the tests hold them to it.

_TOKEN = re.compile(
    r"\s*('[^'\\\n]*'"
    r'|"[^"\\\n]*"'
    r"|-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?(?![\w.])"
    r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?![\w.])"
    r"|\S)",
    re.ASCII,
)
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_NUMBER_START = frozenset("0123456789-.")
_LITERAL_NAMES: dict[str, Any] = {"True": True, "False": False, "None": None, **_JSON_NAMES}
_CLOSING = {"[": "]", "(": ")", "{": "}"}
_END = ""


class _NotPlain(Exception):
    """The text is not a plain call list; the `ast` path reads it instead."""


def _read_plain_calls(text: str) -> list[ToolCall] | None:
    # Each token is a string literal, a number, a dotted name or one other character; a
    # character the regex could not place any other way is its own token and fails below.
    tokens = _TOKEN.findall(text)
    tokens.append(_END)
    try:
        return _PlainReader(tokens).calls()
    except _NotPlain:
        return None


def _is_string_token(token: str) -> bool:
    return len(token) >= 2 and token[0] in "'\"" and token[-1] == token[0]


class _PlainReader:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.position = 0

    def calls(self) -> list[ToolCall]:
        if self.tokens[0] == "[":
            self.position = 1
            calls = self._sequence("]", self._call)
        else:
            calls = [self._call()]
        if self.tokens[self.position] != _END:
            raise _NotPlain
        return calls

    def _next(self) -> str:
        token = self.tokens[self.position]
        self.position += 1
        return token

    def _expect(self, token: str) -> None:
        if self._next() != token:
            raise _NotPlain

    def _name(self) -> str:
        token = self._next()
        if not token or token[0] not in _NAME_START or any(keyword.iskeyword(part) for part in token.split(".")):
            raise _NotPlain
        return token

    def _sequence(self, closing: str, item: Any) -> list[Any]:
        """Items up to `closing`, comma separated, a trailing comma allowed; the opener is taken."""
        items = []
        while self.tokens[self.position] != closing:
            items.append(item())
            following = self.tokens[self.position]
            if following == ",":
                self.position += 1
            elif following != closing:
                raise _NotPlain
        self.position += 1
        return items

    def _call(self) -> ToolCall:
        name = self._name()
        self._expect("(")
        arguments: dict[str, Any] = {}
        for key, value in self._sequence(")", self._keyword):
            if key in arguments:
                raise _NotPlain
            arguments[key] = value
        return ToolCall(name=name[: -len(".func")] if name.endswith(".func") else name, arguments=arguments)

    def _keyword(self) -> tuple[str, Any]:
        key = self._name()
        if "." in key:
            raise _NotPlain
        self._expect("=")
        return key, self._value(0)

    def _value(self, depth: int) -> Any:
        if depth > MAX_NESTING:
            raise _NotPlain
        token = self._next()
        first = token[:1]
        if _is_string_token(token):
            return token[1:-1]
        if first in _NUMBER_START and first:
            return _number(token)
        if token in _LITERAL_NAMES:
            return _LITERAL_NAMES[token]
        if token in _CLOSING:
            return self._container(token, depth)
        raise _NotPlain

    def _container(self, opening: str, depth: int) -> Any:
        if opening == "{":
            return dict(self._sequence("}", lambda: self._pair(depth)))
        items = self._sequence(_CLOSING[opening], lambda: self._value(depth + 1))
        if opening == "[":
            return items
        if len(items) == 1 and self.tokens[self.position - 2] != ",":
            return items[0]  # (x) is x itself, not a tuple
        return tuple(items)

    def _pair(self, depth: int) -> tuple[str, Any]:
        key = self._next()
        if not _is_string_token(key):
            raise _NotPlain
        self._expect(":")
        return key[1:-1], self._value(depth + 1)


def _number(token: str) -> int | float:
    digits = token.lstrip("-")
    if not digits or digits == ".":
        raise _NotPlain
    if digits.isdigit():
        if len(digits) > 1 and digits[0] == "0":
            raise _NotPlain  # 007 is a syntax error in Python 3
        return int(token)
    try:
        return float(token)
    except ValueError:
        raise _NotPlain from None
