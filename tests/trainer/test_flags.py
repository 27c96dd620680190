"""The warning flags (`trainer.flags`): reward hacking, length drift, repetition, each raised once."""

from __future__ import annotations

from trainer.flags import FlagWatch


def test_reward_rising_while_held_out_falls_is_flagged_once():
    watch = FlagWatch()
    watch.train_reward(0.1)
    assert watch.heldout(0, {"correct_arguments_rate": {"value": 0.5}}) is None
    for _ in range(5):
        watch.train_reward(0.9)
    flag = watch.heldout(10, {"correct_arguments_rate": {"value": 0.3}})
    assert flag is not None and flag.level == "warning" and flag.message.startswith("flag: reward_hacking")
    assert watch.heldout(20, {"correct_arguments_rate": {"value": 0.2}}) is None


def test_a_high_reward_from_the_first_step_is_no_rise_after_a_step_0_evaluation():
    # Seen in a real run: held-out evaluated before any step, the SFT-started reward high from step 1.
    watch = FlagWatch()
    assert watch.heldout(0, {"correct_arguments_rate": {"value": 0.312}}) is None
    for reward in (0.9, 0.875, 0.95, 0.9, 0.9, 0.85, 0.9, 0.95):
        watch.train_reward(reward)
    assert watch.heldout(20, {"correct_arguments_rate": {"value": 0.25}}) is None


def test_a_reward_rising_after_a_step_0_evaluation_while_held_out_falls_is_flagged():
    watch = FlagWatch()
    watch.heldout(0, {"correct_arguments_rate": {"value": 0.5}})
    for reward in (0.1,) * 5 + (0.9,) * 5:
        watch.train_reward(reward)
    flag = watch.heldout(10, {"correct_arguments_rate": {"value": 0.3}})
    assert flag is not None and "rose 0.100 → 0.900" in flag.message


def test_rising_reward_with_rising_held_out_is_not_flagged():
    watch = FlagWatch()
    watch.train_reward(0.1)
    watch.heldout(0, {"correct_arguments_rate": {"value": 0.3}})
    watch.train_reward(0.9)
    assert watch.heldout(10, {"correct_arguments_rate": {"value": 0.5}}) is None


def test_completion_length_drift_is_flagged():
    watch = FlagWatch()
    assert all(watch.completion_length(step, 20.0) is None for step in range(1, 5))
    assert watch.completion_length(5, 35.0) is None
    flag = watch.completion_length(6, 64.0)
    assert flag is not None and flag.message.startswith("flag: length_drift")


def test_verbatim_repeats_across_prompts_are_flagged():
    watch = FlagWatch()
    varied = [("a", "x1"), ("a", "x2"), ("b", "y1"), ("b", "y2")]
    assert watch.completions(1, varied) is None
    collapsed = [("a", "same"), ("a", "same"), ("b", "same"), ("b", "other")]
    flag = watch.completions(2, collapsed)
    assert flag is not None and flag.message.startswith("flag: repetition") and "3 of 4" in flag.message
