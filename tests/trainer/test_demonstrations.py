"""Reference episodes for episode SFT: played in the environment, rendered as evaluation renders them, masked."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.trainer.tiny_model import REPO_ROOT, TINY_MODEL
from trainer.contracts import EpisodeSetup, ExpectedCall, Task
from trainer.demonstrations import episode_example, play_reference, play_references
from trainer.environments import make_environment
from trainer.examples.orders import OrderDesk
from trainer.models import load_tokenizer
from trainer.prompts import CLOSING_TEXT, format_tool_calls, reference_calls, render_prompt
from trainer.spec.tasks import load_tasks

ORDERS = "trainer.examples.orders:environment"
ORDER_TASKS = REPO_ROOT / "trainer" / "examples" / "orders_tasks.jsonl"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(TINY_MODEL))


@pytest.fixture
def desk():
    return make_environment(ORDERS)


def looked_up(task_id: str = "orders-refund-latest-ana") -> Task:
    """Ana's latest order refunded, the reference looking it up first: which order it is, only the desk knows."""
    task = next(task for task in load_tasks([ORDER_TASKS]) if task.id == task_id)
    lookups = [ExpectedCall.exact("find_customer", {"email": "ana@example.com"}),
               ExpectedCall.exact("get_order", {"order_id": "A-1003"})]
    return dataclasses.replace(task, expected_calls=[*lookups, *task.expected_calls])


def masked_text(example: dict, tokenizer, bit: int) -> str:
    return tokenizer.decode([t for t, m in zip(example["input_ids"], example["assistant_masks"], strict=True)
                             if m == bit])


def test_the_tokens_under_the_loss_are_exactly_the_episodes_answers(desk, tokenizer):
    played = play_reference(looked_up(), desk)
    example = episode_example(played, tokenizer)
    answers = [format_tool_calls([call]) for call in reference_calls(looked_up())] + [CLOSING_TEXT]
    assert masked_text(example, tokenizer, 1) == "".join(answer + "<|im_end|>" for answer in answers)
    unmasked = masked_text(example, tokenizer, 0)
    assert '<tool_call>{"name": "find_customer"' not in unmasked and unmasked.endswith("<|im_start|>assistant\n")
    assert "<tool_response>" in unmasked and "Ana (ana@example.com) says" in unmasked  # results and request masked


def test_the_text_is_each_turns_prompt_followed_by_its_answer_as_generation_tokenizes_them(desk, tokenizer):
    played = play_reference(looked_up(), desk)
    example = episode_example(played, tokenizer)
    ids, mask = example["input_ids"], example["assistant_masks"]
    starts = [i for i in range(len(mask)) if mask[i] == 1 and (i == 0 or mask[i - 1] == 0)]
    assistant_turns = [i for i, turn in enumerate(played.turns) if turn["role"] == "assistant"]
    assert len(starts) == len(assistant_turns) == 4
    for start, index in zip(starts, assistant_turns, strict=True):
        shown = dataclasses.replace(played.task, messages=[*played.task.messages, *played.turns[:index]])
        assert ids[:start] == tokenizer(render_prompt(shown, tokenizer), add_special_tokens=False)["input_ids"]
    assert ids == tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"]


def test_the_observations_are_the_environments_so_the_looked_up_order_is_in_a_tool_response(desk, tokenizer):
    played = play_reference(looked_up(), desk)
    observations = [turn["content"] for turn in played.turns if turn["role"] == "tool"]
    assert json.loads(observations[0]) == {"email": "ana@example.com", "order_ids": ["A-1001", "A-1003"]}
    assert json.loads(observations[1])["status"] == "delivered" and observations[2] == "Order A-1003 refunded."
    text = tokenizer.decode(episode_example(played, tokenizer)["input_ids"])
    assert '<tool_response>\n{"email": "ana@example.com", "order_ids": ["A-1001", "A-1003"]}\n</tool_response>' in text
    assert '"item": "office chair", "status": "delivered"' in text
    assert played.passed and played.refused == 0


def test_a_refused_reference_call_is_still_played_and_counted(desk):
    task = looked_up()
    wrong = dataclasses.replace(task, expected_calls=[ExpectedCall.exact("cancel_order", {"order_id": "A-1003"}),
                                                      *task.expected_calls])
    references = play_references([wrong], desk)
    played = references.played[0]
    assert references.refused_calls == played.refused == 1
    assert "only a processing order can be cancelled" in played.turns[1]["content"]
    assert [turn["role"] for turn in played.turns].count("assistant") == 5


def test_a_task_without_a_call_is_played_as_the_answer_alone_and_trained_on(desk, tokenizer):
    nothing = Task(id="n", messages=[{"role": "user", "content": "Is the desk open today?"}], tools=looked_up().tools,
                   expected_calls=[], no_call_expected=True)
    references = play_references([nothing], desk)
    assert [played.task.id for played in references.played] == ["n"] and references.played[0].passed
    assert [turn["role"] for turn in references.played[0].turns] == ["assistant"]
    example = episode_example(references.played[0], tokenizer)
    assert masked_text(example, tokenizer, 1) == CLOSING_TEXT + "<|im_end|>"
    assert "<tool_call>" not in tokenizer.decode(example["input_ids"]).split("Is the desk open today?")[1]


def test_a_task_without_reference_calls_whose_end_state_the_answer_misses_is_not_trained_on(desk):
    judged_by_state = Task(id="s", messages=[{"role": "user", "content": "Refund Ana's lamp."}], tools=[],
                           expected_calls=[], episode=EpisodeSetup(expected_state={"A-1001": "refunded"}))

    class StateJudged(OrderDesk):
        def judge(self):
            return dataclasses.replace(super().judge(), passed=False, reason="A-1001 is not refunded")

    references = play_references([judged_by_state, looked_up()], StateJudged())
    assert [demonstration.task.id for demonstration in references.unreferenced] == ["s"]
    assert [demonstration.task.id for demonstration in references.played] == [looked_up().id]


def test_a_broken_environment_keeps_its_episode_out(desk):
    class Broken(OrderDesk):
        def step(self, call):
            raise RuntimeError("the desk is down")

    references = play_references([looked_up()], Broken())
    assert references.played == [] and [broken.task.id for broken in references.broken] == [looked_up().id]
    assert "RuntimeError: the desk is down" in references.broken[0].failure


def test_the_episode_offers_the_tools_the_environment_decides(tokenizer):
    class Offering(OrderDesk):
        def offered_tools(self):
            return [tool for tool in looked_up().tools if tool["function"]["name"] != "cancel_order"]

    played = play_reference(looked_up(), Offering())
    assert "cancel_order" not in tokenizer.decode(episode_example(played, tokenizer)["input_ids"])
