"""Length limits against the train tasks (`trainer.lengths`): measured, reported, derived, refused when they cut."""

from __future__ import annotations

import dataclasses

import pytest

from tests.trainer.tiny_model import tiny_tasks
from trainer.lengths import (
    Lengths,
    answer_tokens,
    checked_limit,
    episode_tokens,
    first_answer_tokens,
    refuse_empty_examples,
    report_cut,
)
from trainer.spec.config import SpecError


class Recorder:
    def __init__(self) -> None:
        self.events: list = []

    def emit(self, event) -> None:
        self.events.append(event)


class WordTokenizer:
    """One token per whitespace-separated word: lengths a test can count by eye."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": text.split()}


def test_a_limit_that_cuts_too_many_answers_is_refused_naming_the_length_needed():
    lengths = Lengths("reference answers", [40, 60, 90, 165])
    events = Recorder()
    with pytest.raises(SpecError, match=r"max_completion_length 64 would cut 2 of 4 reference answers \(longest 165 "
                                        r"tokens\): set max_completion_length to at least 184"):
        checked_limit(lengths, knob="max_completion_length", limit=64, max_cut_share=0.02, events=events)
    cut_share = [e for e in events.events if getattr(e, "name", "") == "length/max_completion_length/cut_share"]
    assert cut_share[0].value == 0.5


def test_a_null_limit_is_derived_from_the_99th_percentile_plus_a_margin():
    lengths = Lengths("reference answers", list(range(1, 101)))  # p99 = 99.01
    events = Recorder()
    limit = checked_limit(lengths, knob="max_completion_length", limit=None, max_cut_share=0.02, events=events)
    assert limit == 120  # 99.01 + 16, rounded up to a multiple of 8
    assert "derived from the train tasks" in events.events[-1].message


def test_a_limit_within_the_allowed_share_runs_and_says_what_it_cuts():
    events = Recorder()
    limit = checked_limit(Lengths("reference answers", [10] * 99 + [500]), knob="max_completion_length", limit=64,
                          max_cut_share=0.02, events=events)
    assert limit == 64
    assert events.events[-1].level == "warning" and "cuts 1 of 100" in events.events[-1].message


def test_answers_are_counted_as_the_prompt_format_writes_them_plus_the_end_of_turn():
    tasks = [task for task in tiny_tasks() if task.expected_calls]
    counts = answer_tokens(tasks, WordTokenizer()).counts
    assert len(counts) == len(tasks) and all(count >= 2 for count in counts)


def test_for_episodes_each_reference_call_is_an_answer_of_its_own():
    one_call = next(task for task in tiny_tasks() if task.expected_calls)
    twice = dataclasses.replace(one_call, expected_calls=one_call.expected_calls * 2)
    whole, per_call = answer_tokens([twice], WordTokenizer()), answer_tokens([twice], WordTokenizer(), episodes=True)
    assert per_call.counts == answer_tokens([one_call], WordTokenizer()).counts * 2
    assert whole.counts[0] > max(per_call.counts)  # the whole answer holds both calls; each turn makes one


def test_held_out_cuts_are_reported_never_refused():
    events = Recorder()
    report_cut(Lengths("reference answers", [10, 200]), knob="eval_max_new_tokens", limit=64, events=events)
    assert "cuts 1 of 2 held-out" in events.events[0].message


def test_sft_examples_whose_prompt_fills_the_limit_are_reported_and_all_of_them_refused():
    events = Recorder()
    refuse_empty_examples(Lengths("prompts", [100, 300, 250]), limit=256, events=events)
    assert "leaves no answer token in 1 of 3 examples" in events.events[0].message
    with pytest.raises(SpecError, match=r"max_length 256 leaves no answer token in any of the 2 examples \(the "
                                        r"shortest prompt has 256 tokens\)"):
        refuse_empty_examples(Lengths("prompts", [300, 256]), limit=256, events=Recorder())


def test_episodes_are_counted_whole_and_up_to_their_first_answer_token():
    examples = [{"input_ids": [1, 2, 3, 4, 5], "assistant_masks": [0, 0, 1, 0, 1]},
                {"input_ids": [1, 2, 3], "assistant_masks": [0, 0, 0]}]
    assert episode_tokens(examples).counts == [5, 3]
    assert first_answer_tokens(examples).counts == [2, 3]
