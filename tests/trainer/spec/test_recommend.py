from __future__ import annotations

import pytest

from trainer.spec.recommend import DPO, GRPO, NONE, PROMPT, SFT, AgentSignals, RecommendationRules, recommend


def rate(value, n=100):
    return {"value": value, "low": max(0.0, value - 0.05), "high": min(1.0, value + 0.05), "n": n}


def overall(valid, correct, n=100):
    return {"valid_json_rate": rate(valid, n), "correct_arguments_rate": rate(correct, n)}


def methods(advice) -> list[str]:
    return [option.method for option in advice.options]


# --- SFT and GRPO, from the metrics ---------------------------------------------------------------


def test_a_very_low_valid_format_rate_means_a_prompt_then_sft_with_the_numbers_shown():
    advice = recommend(overall(valid=0.02, correct=0.0))
    assert methods(advice) == [PROMPT, SFT]  # the guide's matrix: format not followed -> prompt, then SFT
    assert "98% of the outputs are not valid calls" in advice.reason
    sft = advice.options[1]
    assert "valid-format rate is very low (2%, 95% CI 0%-7%, n=100)" in sft.reason
    assert sft.evidence["valid_json_rate"]["value"] == 0.02


def test_valid_calls_that_are_almost_never_right_mean_sft_not_grpo():
    advice = recommend(overall(valid=0.95, correct=0.01))
    assert methods(advice) == [SFT]
    assert "too few successful rollouts" in advice.reason


def test_sometimes_right_but_unreliable_with_a_verifier_means_grpo():
    advice = recommend(overall(valid=0.95, correct=0.4))
    assert methods(advice) == [GRPO]
    assert "40%" in advice.reason and "programmatic verifier" in advice.reason


def test_reliably_right_means_nothing_to_change_on_these_tasks():
    advice = recommend(overall(valid=1.0, correct=0.95), signals=AgentSignals(preference_pairs=500))
    assert methods(advice) == [NONE]


def test_unmeasured_rates_count_as_not_shown():
    advice = recommend({"valid_json_rate": {"value": None, "low": None, "high": None, "n": 0}})
    assert methods(advice) == [PROMPT, SFT]
    assert "not measured" in advice.options[1].reason


# --- A prompt change first, where the failures are of its kind ------------------------------------------


def test_reviewed_failures_that_are_mostly_wrong_tools_put_a_prompt_change_first():
    signals = AgentSignals(failure_buckets={"wrong_tool": 3, "hallucinated_api": 1, "bad_planning": 4})
    advice = recommend(overall(valid=0.95, correct=0.4), signals=signals)
    assert methods(advice) == [PROMPT, GRPO]
    assert "50% of the failures are format errors, wrong tools or hallucinated APIs" in advice.reason
    assert advice.evidence["prompt_bucket_share_reviewed"] == 0.5


def test_reviewed_failures_of_other_kinds_leave_the_prompt_out():
    signals = AgentSignals(failure_buckets={"wrong_tool": 1, "bad_planning": 9})
    assert methods(recommend(overall(valid=0.95, correct=0.4), signals=signals)) == [GRPO]


def test_the_evaluations_failed_tasks_per_bucket_count_as_well():
    by_bucket = {"wrong_tool": {"tasks": 10, "correct_arguments_rate": rate(0.2, 10)},
                 "retrieval_failure": {"tasks": 10, "correct_arguments_rate": rate(0.8, 10)}}  # fmt: skip
    advice = recommend(overall(valid=0.95, correct=0.5), by_bucket=by_bucket)
    assert methods(advice) == [PROMPT, GRPO]  # 8 of the 10 failed tasks are wrong-tool ones
    assert advice.evidence["prompt_bucket_share_evaluated"] == 0.8


# --- DPO, from the agent's pairs ------------------------------------------------------------------------


def test_enough_preference_pairs_add_dpo_between_sft_and_grpo():
    advice = recommend(overall(valid=0.95, correct=0.4), signals=AgentSignals(preference_pairs=20))
    assert methods(advice) == [DPO, GRPO]
    assert advice.reason.startswith("20 preference pairs")
    advice = recommend(overall(valid=0.3, correct=0.0), signals=AgentSignals(preference_pairs=25))
    assert methods(advice) == [PROMPT, SFT, DPO]


def test_too_few_pairs_leave_dpo_out():
    assert DPO not in methods(recommend(overall(valid=0.95, correct=0.4), signals=AgentSignals(preference_pairs=19)))


# --- GRPO needs a reward it can trust -------------------------------------------------------------------


def test_without_a_verifier_grpo_needs_a_judge_the_reviewers_agree_with():
    unreliable = overall(valid=0.95, correct=0.4)
    trusted = recommend(unreliable, signals=AgentSignals(verifier=False, judge_agreement=0.85))
    assert methods(trusted) == [GRPO] and "the judge (85% agreement with reviewers)" in trusted.reason
    for agreement in (0.6, None):
        untrusted = recommend(unreliable, signals=AgentSignals(verifier=False, judge_agreement=agreement))
        assert methods(untrusted) == [PROMPT]  # nothing to train on: the fix within reach
        assert "no training signal applies yet" in untrusted.reason


# --- The rules are typed and overridable ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (RecommendationRules(min_valid_json=0.97), [SFT, DPO, GRPO]),
        (RecommendationRules(min_pairs_for_dpo=100), [GRPO]),
        (RecommendationRules(reliable_success=0.4), [NONE]),
        (RecommendationRules(prompt_invalid_share=0.05), [PROMPT, DPO, GRPO]),
    ],
)
def test_the_thresholds_can_be_changed(rules, expected):
    advice = recommend(overall(valid=0.95, correct=0.4), rules, signals=AgentSignals(preference_pairs=50))
    assert methods(advice) == expected


def test_the_json_keeps_the_first_options_fields_and_every_option():
    stored = recommend(overall(valid=0.02, correct=0.0)).to_json()
    assert stored["method"] == PROMPT and [option["method"] for option in stored["options"]] == [PROMPT, SFT]
    assert set(stored["options"][1]) == {"method", "reason", "evidence"}
