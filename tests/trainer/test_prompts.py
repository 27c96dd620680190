from __future__ import annotations

import copy
import json

import pytest

from tests.trainer.tiny_model import EXTERNAL, TINY_MODEL, tiny_tasks
from trainer.contracts import ExpectedCall, Task
from trainer.models import load_tokenizer
from trainer.parsing import parse_tool_calls
from trainer.prompts import (
    CLOSING_TEXT,
    FORMAT_INSTRUCTIONS,
    EpisodeRenderError,
    format_tool_calls,
    prompt_messages,
    reference_calls,
    render_episode,
    render_prompt,
    served_chat_template,
    template_supports_tools,
    with_prompt_change,
)
from trainer.verifiers import get_verifier

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

# A template in the style of Qwen's: it renders the tools itself.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for tool in tools %}{{ tool['function']['name'] }};{% endfor %}"
    "<|im_end|>\n{% endif %}{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(TINY_MODEL))


def weather_task(messages=None):
    return Task(
        id="w1",
        messages=messages or [{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        expected_calls=[ExpectedCall.exact("get_weather", {"city": "Paris"})],
    )


def test_chatml_without_tool_support_gets_tools_and_format_in_the_system_prompt(tokenizer):
    assert not template_supports_tools(tokenizer)
    prompt = render_prompt(weather_task(), tokenizer)
    system = prompt.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n")
    assert json.dumps(WEATHER_TOOL["function"]["parameters"]) in system
    assert FORMAT_INSTRUCTIONS in system
    assert "SmolLM" not in prompt  # the template's default system prompt is replaced, not added to
    assert prompt.endswith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")


def test_the_tasks_own_system_text_comes_first(tokenizer):
    task = weather_task(
        [{"role": "system", "content": "Today's date is 2023-11-30."}, {"role": "user", "content": "Weather tomorrow?"}]
    )
    messages = prompt_messages(task)
    assert [message["role"] for message in messages] == ["system", "user"]
    assert messages[0]["content"].startswith("Today's date is 2023-11-30.\n\n")


def test_earlier_tool_calls_and_results_become_text_turns_in_the_same_format():
    task = weather_task(
        [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "And in Rome?"},
        ]
    )
    turns = prompt_messages(task)[1:]
    assert turns[1] == {
        "role": "assistant",
        "content": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    }
    assert turns[2] == {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}


def test_a_template_with_tool_support_renders_the_tools_itself(tokenizer):
    tokenizer = load_tokenizer(str(TINY_MODEL))
    tokenizer.chat_template = TOOL_TEMPLATE
    assert template_supports_tools(tokenizer)
    prompt = render_prompt(weather_task(), tokenizer)
    assert prompt.startswith("<|im_start|>system\nTOOLS:get_weather;<|im_end|>")
    assert FORMAT_INSTRUCTIONS not in prompt


PREAMBLE = "Always call a tool when one fits; never answer in prose."


def test_a_prompt_change_puts_the_preamble_first_in_the_system_prompt_and_the_new_tool_description(tokenizer):
    task = weather_task([{"role": "system", "content": "Today's date is 2023-11-30."},
                         {"role": "user", "content": "Weather tomorrow?"}])  # fmt: skip
    changed = with_prompt_change(task, PREAMBLE, {"get_weather": "Forecast for a city, today or later."})
    system = render_prompt(changed, tokenizer).split("<|im_end|>")[0]
    assert system.startswith(f"<|im_start|>system\n{PREAMBLE}\n\nToday's date is 2023-11-30.\n\n")
    assert '"description": "Forecast for a city, today or later."' in system and "Weather in a city." not in system
    assert (changed.id, changed.expected_calls) == (task.id, task.expected_calls)  # pairs with the baseline
    assert task.messages[0]["content"] == "Today's date is 2023-11-30."  # the original task is left as it was
    assert WEATHER_TOOL["function"]["description"] == "Weather in a city."


def test_a_preamble_without_a_system_message_becomes_one_and_templates_with_tools_see_it(tokenizer):
    tokenizer = load_tokenizer(str(TINY_MODEL))
    tokenizer.chat_template = TOOL_TEMPLATE
    prompt = render_prompt(with_prompt_change(weather_task(), PREAMBLE), tokenizer)
    assert f"<|im_start|>system\n{PREAMBLE}<|im_end|>" in prompt


def test_no_change_leaves_the_prompt_as_it_was(tokenizer):
    assert render_prompt(with_prompt_change(weather_task(), "  ", {}), tokenizer) == render_prompt(
        weather_task(), tokenizer
    )


@pytest.mark.parametrize("task", tiny_tasks(), ids=lambda task: task.id)
def test_a_reference_answer_in_the_prompt_format_parses_and_passes(task):
    answer = format_tool_calls(reference_calls(task))
    parsed = parse_tool_calls(answer)
    assert parsed.ok or task.no_call_expected
    assert get_verifier("tool_call").score(task, answer).passed


def test_reference_calls_leave_out_arguments_that_may_only_be_omitted():
    task = Task(
        id="t",
        messages=[],
        tools=[WEATHER_TOOL],
        expected_calls=[ExpectedCall(name="get_weather", arguments={"city": ["Paris", "paris"], "unit": [""]})],
    )
    assert reference_calls(task)[0].arguments == {"city": "Paris"}


def test_an_episode_renders_as_one_text_whose_answers_start_where_each_turns_prompt_ends(tokenizer):
    task = weather_task()
    turns = [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": CLOSING_TEXT},
    ]  # fmt: skip
    rendered = render_episode(task, turns, tokenizer)
    (first_start, first_end), (last_start, last_end) = rendered.assistant_spans
    assert rendered.text[:first_start] == render_prompt(task, tokenizer)
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert rendered.text[first_start:first_end] == call + "<|im_end|>"
    assert rendered.text[last_start:last_end] == CLOSING_TEXT + "<|im_end|>"
    assert "<tool_response>\nsunny\n</tool_response>" in rendered.text[first_end:last_start]


def test_a_template_that_rewrites_earlier_turns_cannot_render_an_episode():
    tokenizer = load_tokenizer(str(TINY_MODEL))
    # Like templates that drop an earlier turn's reasoning: only the last assistant turn keeps its text.
    tokenizer.chat_template = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['role'] == 'assistant' and not loop.last %}(earlier){% else %}{{ message['content'] }}"
        "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    turns = [{"role": "assistant", "content": "first"}, {"role": "user", "content": "more"},
             {"role": "assistant", "content": "second"}]
    with pytest.raises(EpisodeRenderError, match="renders turn 1 of the episode differently"):
        render_episode(weather_task(), turns, tokenizer)


def test_the_served_chat_template_renders_a_chat_request_as_render_prompt_renders_the_task():
    # As vLLM's server hands it over: each call's arguments parsed into an object.
    tokenizer = load_tokenizer(str(TINY_MODEL))
    records = json.loads((EXTERNAL / "tau_bench" / "gpt-4o-airline.json").read_text())[:10]
    tools = tiny_tasks()[0].tools
    conversations = [Task(id=str(record["task_id"]), messages=record["traj"][:12], tools=tools, expected_calls=[],
                          no_call_expected=True) for record in records]  # fmt: skip
    tasks = [*tiny_tasks(), *conversations]
    assert sum(any(message.get("tool_calls") for message in task.messages) for task in tasks) >= 5
    for task in tasks:
        messages = copy.deepcopy(task.messages)
        for call in (call for message in messages for call in message.get("tool_calls") or []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        served = tokenizer.apply_chat_template(messages, tools=task.tools, chat_template=served_chat_template(),
                                               add_generation_prompt=True, tokenize=False)  # fmt: skip
        assert served == render_prompt(task, tokenizer), task.id
