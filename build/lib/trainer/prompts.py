"""Render a task as the prompt a model sees: one function for evaluation, SFT and GRPO alike.

`render_prompt(task, tokenizer)` returns the text to generate from. Where the tokenizer's
chat template supports tools (it renders `tools=` into the prompt), the template gets the
task's messages and tools as they are and prescribes its own call format. Otherwise (as
with SmolLM2's ChatML template, which ignores `tools=` and has no tool turns) the system
prompt carries the tools as JSON Schema and the output format, a JSON call inside
`<tool_call>` tags that `trainer.parsing` reads; earlier tool calls and tool results in
the conversation are written as text turns in that same format.
`format_tool_calls` writes calls in that format, for history turns and SFT targets.
`render_episode` renders a whole episode (the task's messages, then the episode's turns) as one
training text and marks where each of the episode's assistant turns lies in it, each exactly as
`render_prompt` showed the turns before it (episode SFT). `CLOSING_TEXT` is the answer without a
call that ends a reference episode. Parsing what the model answers is `trainer.parsing`'s job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainer.contracts import OMITTABLE, Task, ToolCall
from trainer.parsing import parse_tool_calls

TOOLS_INTRO = "You can call the following tools. Each is described as JSON Schema:"
FORMAT_INSTRUCTIONS = (
    "To call a tool, reply with only a JSON object inside <tool_call></tool_call> tags, "
    "with the tool's name and its arguments, like this:\n"
    '<tool_call>{"name": "tool_name", "arguments": {"argument_name": "value"}}</tool_call>\n'
    "Use one tag per call. If none of the tools fits the request, answer in plain text without a tool call."
)
# The last turn of a reference episode (episode SFT): an episode ends `answered` only on an answer without a
# call, and the reference calls carry no such answer. One short fixed text, so that what the model learns there
# is to stop calling once the work is done, not any wording; evaluation judges the end state, never this text.
CLOSING_TEXT = "Done."
_PROBE_MESSAGES = [{"role": "user", "content": "ping"}]
_PROBE_TOOL = {"type": "function", "function": {"name": "flywheel_probe_tool", "description": "probe",
                                                 "parameters": {"type": "object", "properties": {}}}}
_TOOL_SUPPORT: dict[str, bool] = {}


def render_prompt(task: Task, tokenizer: Any) -> str:
    """The prompt text for `task`, ending where the assistant's answer begins."""
    if template_supports_tools(tokenizer):
        return str(tokenizer.apply_chat_template(
            task.messages, tools=task.tools, add_generation_prompt=True, tokenize=False
        ))
    return str(tokenizer.apply_chat_template(prompt_messages(task), add_generation_prompt=True, tokenize=False))


class EpisodeRenderError(ValueError):
    """The chat template renders earlier turns differently from how it prompted them: no one training text fits."""


@dataclass(frozen=True)
class RenderedEpisode:
    """A whole episode as one text, and the [start, end) characters of each of its assistant turns.

    A turn's span runs from where its prompt ended (`render_prompt` of the turns before it) through
    the template's end-of-turn marker: what the model would have had to generate there.
    """

    text: str
    assistant_spans: list[tuple[int, int]]


def render_conversation(task: Task, tokenizer: Any) -> str:
    """The task's messages rendered as a finished conversation (no generation prompt): `render_prompt`'s rendering."""
    if template_supports_tools(tokenizer):
        return str(tokenizer.apply_chat_template(task.messages, tools=task.tools, tokenize=False))
    return str(tokenizer.apply_chat_template(prompt_messages(task), tokenize=False))


def render_episode(task: Task, turns: Sequence[dict[str, Any]], tokenizer: Any) -> RenderedEpisode:
    """`task` followed by an episode's `turns` (assistant and tool messages), with the assistant turns' spans.

    An EpisodeRenderError when a turn's prompt is not where the whole text starts: a template that
    rewrites earlier turns (drops their reasoning, say) shows the model text this one does not hold.
    """
    whole = render_conversation(replace(task, messages=[*task.messages, *turns]), tokenizer)
    spans = []
    for index, turn in enumerate(turns):
        if turn.get("role") != "assistant":
            continue
        prompt = render_prompt(replace(task, messages=[*task.messages, *turns[:index]]), tokenizer)
        # Trailing whitespace after the end-of-turn marker belongs to the next turn's prompt, not to the answer.
        through = render_conversation(replace(task, messages=[*task.messages, *turns[: index + 1]]), tokenizer).rstrip()
        if not (through.startswith(prompt) and whole.startswith(through)):
            raise EpisodeRenderError(f"task {task.id}: the chat template renders turn {index + 1} of the episode "
                                     "differently once later turns follow, so one text cannot hold every prompt")
        spans.append((len(prompt), len(through)))
    return RenderedEpisode(whole, spans)


def served_chat_template() -> str:
    """A Jinja chat template that renders an OpenAI chat request as `render_prompt` renders the same task.

    For a ChatML model whose own template ignores `tools` (the demo model): given to vLLM's server
    as `--chat-template` (with `--chat-template-content-format string`), a chat request with tools
    becomes, token for token, the prompt the trainer trained and evaluated on (`prompt_messages` in
    ChatML: the system prompt with the tools and the output format, calls and results as text
    turns), and vLLM's `hermes` tool parser reads the `<tool_call>` answers back. vLLM hands the
    template each call's arguments already parsed into an object; `tojson` then writes them as
    `json.dumps` does.
    """
    return "".join([
        "{%- set system = namespace(parts=[]) -%}",
        "{%- for message in messages if message.role == 'system' and message.content and message.content.strip() -%}",
        "{%- set system.parts = system.parts + [message.content] -%}",
        "{%- endfor -%}",
        "{{- '<|im_start|>system\\n' -}}",
        "{%- for part in system.parts -%}{{- part + '\\n\\n' -}}{%- endfor -%}",
        "{{- ", _jinja_string(TOOLS_INTRO + "\n<tools>\n"), " -}}",
        "{%- for tool in tools or [] -%}",
        "{%- set function = tool.function if tool.function is defined else tool -%}",
        "{{- {'name': function.name, 'description': function.description if function.description is defined else '',",
        " 'parameters': function.parameters or {'type': 'object', 'properties': {}}} | tojson -}}",
        "{{- '\\n' if not loop.last -}}",
        "{%- endfor -%}",
        "{{- ", _jinja_string("\n</tools>\n\n" + FORMAT_INSTRUCTIONS + "<|im_end|>\n"), " -}}",
        "{%- for message in messages if message.role != 'system' -%}",
        "{%- if message.role == 'assistant' and message.tool_calls -%}",
        "{{- '<|im_start|>assistant\\n' + (message.content + '\\n' if message.content else '') -}}",
        "{%- for call in message.tool_calls -%}",
        "{{- '<tool_call>' + {'name': call.function.name, 'arguments': call.function.arguments} | tojson",
        " + '</tool_call>' + ('\\n' if not loop.last else '') -}}",
        "{%- endfor -%}",
        "{{- '<|im_end|>\\n' -}}",
        "{%- elif message.role == 'tool' -%}",
        "{{- '<|im_start|>user\\n<tool_response>\\n' + (message.content or '')",
        " + '\\n</tool_response><|im_end|>\\n' -}}",
        "{%- else -%}",
        "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' -}}",
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
    ])


def _jinja_string(text: str) -> str:
    """`text` as a Jinja string literal (Jinja reads its escapes as Python's unicode-escape does)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders `tools=` at all (checked once per template)."""
    template = str(getattr(tokenizer, "chat_template", None) or "")
    if template not in _TOOL_SUPPORT:
        plain = tokenizer.apply_chat_template(_PROBE_MESSAGES, add_generation_prompt=True, tokenize=False)
        with_tools = tokenizer.apply_chat_template(
            _PROBE_MESSAGES, tools=[_PROBE_TOOL], add_generation_prompt=True, tokenize=False
        )
        _TOOL_SUPPORT[template] = "flywheel_probe_tool" in with_tools and with_tools != plain
    return _TOOL_SUPPORT[template]


def prompt_messages(task: Task) -> list[dict[str, str]]:
    """The task as plain chat turns: one system prompt with tools and format, then the turns as text."""
    system_texts = [_text(message) for message in task.messages if message.get("role") == "system"]
    turns = [_plain_turn(message) for message in task.messages if message.get("role") != "system"]
    return [{"role": "system", "content": system_prompt(task.tools, system_texts)}, *turns]


def system_prompt(tools: Sequence[Mapping[str, Any]], preamble: Sequence[str] = ()) -> str:
    """The task's own system text, then the tools (one JSON object a line) and the output format."""
    described = "\n".join(json.dumps(_tool_description(tool), ensure_ascii=False) for tool in tools)
    parts = [text for text in preamble if text.strip()]
    parts.append(f"{TOOLS_INTRO}\n<tools>\n{described}\n</tools>")
    parts.append(FORMAT_INSTRUCTIONS)
    return "\n\n".join(parts)


def _tool_description(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool)
    described = {"name": function["name"], "description": function.get("description", "")}
    described["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    return described


def _plain_turn(message: Mapping[str, Any]) -> dict[str, str]:
    role = message.get("role")
    if role == "assistant" and message.get("tool_calls"):
        calls = parse_tool_calls({"tool_calls": message["tool_calls"]}).calls
        text = _text(message)
        return {"role": "assistant", "content": (text + "\n" if text else "") + format_tool_calls(calls)}
    if role == "tool":
        # ChatML has no tool role; the result goes back as the user's turn, tagged like the calls.
        return {"role": "user", "content": f"<tool_response>\n{_text(message)}\n</tool_response>"}
    return {"role": str(role), "content": _text(message)}


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return ""


def with_prompt_change(task: Task, preamble: str = "", tool_descriptions: Mapping[str, str] | None = None) -> Task:
    """`task` as a changed prompt shows it: `preamble` before its system text, tools described anew.

    The preamble joins the task's first system message (or becomes one), so that every renderer,
    a chat template with tools or `prompt_messages`, puts it where the system prompt begins; the
    task's id and expected calls stay, so results pair with the unchanged prompt's task by task.
    """
    messages = list(task.messages)
    if preamble.strip():
        if messages and messages[0].get("role") == "system":
            own = _text(messages[0])
            messages[0] = {**messages[0], "content": f"{preamble}\n\n{own}" if own.strip() else preamble}
        else:
            messages.insert(0, {"role": "system", "content": preamble})
    tools = [_described(tool, tool_descriptions or {}) for tool in task.tools]
    return replace(task, messages=messages, tools=tools)


def tool_names(tasks: Sequence[Task]) -> set[str]:
    return {tool.get("function", tool).get("name") for task in tasks for tool in task.tools}


def _described(tool: dict[str, Any], descriptions: Mapping[str, str]) -> dict[str, Any]:
    if "function" in tool:
        function = tool["function"]
        if function.get("name") in descriptions:
            return {**tool, "function": {**function, "description": descriptions[function["name"]]}}
        return tool
    if tool.get("name") in descriptions:
        return {**tool, "description": descriptions[tool["name"]]}
    return tool


def format_tool_calls(calls: Sequence[ToolCall]) -> str:
    """Calls in the prompt's output format: one `<tool_call>` JSON object per call."""
    return "\n".join(f"<tool_call>{json.dumps(call.to_json(), ensure_ascii=False)}</tool_call>" for call in calls)


def reference_calls(task: Task) -> list[ToolCall]:
    """A correct answer to `task`: each expected call with the first accepted value of each argument.

    Arguments whose only accepted value is omission are left out.
    """
    calls = []
    for expected in task.expected_calls:
        arguments = {}
        for name, alternatives in expected.arguments.items():
            present = [value for value in alternatives if value != OMITTABLE]
            if present:
                arguments[name] = present[0]
        calls.append(ToolCall(name=expected.name, arguments=arguments))
    return calls
