"""The warning flags (`trainer.flags`): each fires on what the shipped settings can produce, once, and not on noise."""

from __future__ import annotations

from trainer.flags import FlagWatch, duplicate_share


def outcomes(passed: int, total: int = 20) -> dict[str, float]:
    return {f"t{number}": 1.0 if number < passed else 0.0 for number in range(total)}


def test_reward_rising_while_held_out_falls_task_by_task_is_flagged_once():
    watch = FlagWatch()
    watch.train_reward(0.1)
    assert watch.heldout(0, outcomes(12)) is None
    for _ in range(5):
        watch.train_reward(0.9)
    flag = watch.heldout(10, outcomes(4))  # 8 of 20 tasks broke, none fixed
    assert flag is not None and flag.level == "warning" and flag.message.startswith("flag: reward_hacking")
    assert "over 20 paired tasks" in flag.message
    assert watch.heldout(20, outcomes(2)) is None


def test_one_flipped_task_is_noise_not_reward_hacking():
    watch = FlagWatch()
    watch.train_reward(0.1)
    watch.heldout(0, outcomes(8, total=16))
    for _ in range(5):
        watch.train_reward(0.9)
    assert watch.heldout(10, outcomes(7, total=16)) is None


def test_a_high_reward_from_the_first_step_is_no_rise_after_a_step_0_evaluation():
    # Seen in a real run: held-out evaluated before any step, the SFT-started reward high from step 1.
    watch = FlagWatch()
    assert watch.heldout(0, outcomes(12)) is None
    for reward in (0.9, 0.875, 0.95, 0.9, 0.9, 0.85, 0.9, 0.95):
        watch.train_reward(reward)
    assert watch.heldout(20, outcomes(4)) is None


def test_a_reward_rising_after_a_step_0_evaluation_while_held_out_falls_is_flagged():
    watch = FlagWatch()
    watch.heldout(0, outcomes(12))
    for reward in (0.1,) * 5 + (0.9,) * 5:
        watch.train_reward(reward)
    flag = watch.heldout(10, outcomes(2))
    assert flag is not None and "rose 0.100 → 0.900" in flag.message


def test_rising_reward_with_rising_held_out_is_not_flagged():
    watch = FlagWatch()
    watch.train_reward(0.1)
    watch.heldout(0, outcomes(4))
    watch.train_reward(0.9)
    assert watch.heldout(10, outcomes(12)) is None


def test_completion_length_drift_fires_at_one_and_a_half_times_the_start_either_way():
    up, down = FlagWatch(), FlagWatch()
    assert all(up.completion_length(step, 20.0) is None for step in range(1, 5))
    assert up.completion_length(5, 26.0) is None
    flag = up.completion_length(6, 40.0)  # recent mean (20+26+40)/3 = 28.7: 1.43x
    assert flag is None
    flag = up.completion_length(7, 40.0)  # (26+40+40)/3 = 35.3: 1.77x
    assert flag is not None and flag.message.startswith("flag: length_drift")
    for step in range(1, 5):
        down.completion_length(step, 60.0)
    fired = [flag for step in range(5, 8) if (flag := down.completion_length(step, 30.0))]
    assert len(fired) == 1 and "the first steps' 60.0" in fired[0].message


def test_a_rising_share_of_cut_completions_is_flagged():
    watch = FlagWatch()
    assert all(watch.truncation(step, 0.0) is None for step in range(1, 5))
    assert watch.truncation(5, 0.2) is None  # recent mean 0.067
    flag = watch.truncation(6, 0.3)  # recent mean 0.167
    assert flag is not None and flag.message.startswith("flag: truncation")


def test_truncation_that_was_there_from_the_start_is_not_a_drift():
    watch = FlagWatch()
    assert all(watch.truncation(step, 0.3) is None for step in range(1, 10))


def test_duplicates_count_within_a_group_not_across_prompts():
    assert duplicate_share([["a", "a", "b", "c"], ["a", "d", "e", "f"]]) == 2 / 8
    assert duplicate_share([["x", "x", "x", "x"]]) == 1.0
    assert duplicate_share([]) == 0.0


def test_groups_collapsing_to_one_answer_are_flagged_with_one_prompt_per_step():
    watch = FlagWatch()
    varied = [["a", "b", "c", "d"]]
    assert all(watch.completions(step, varied) is None for step in range(1, 5))
    collapsed = [["same", "same", "same", "same"]]
    flags = [watch.completions(step, collapsed) for step in range(5, 8)]
    assert flags[:2] == [None, None]
    assert flags[2] is not None and flags[2].message.startswith("flag: repetition")


def test_groups_that_were_already_alike_are_not_a_collapse():
    watch = FlagWatch()
    alike = [["same", "same", "same", "other"]]
    assert all(watch.completions(step, alike) is None for step in range(1, 10))
