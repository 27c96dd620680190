from __future__ import annotations

from trainer.recommend import GRPO, NONE, SFT, RecommendationRules, recommend


def overall(valid, correct, n=100):
    def rate(value):
        return {"value": value, "low": max(0.0, value - 0.05), "high": min(1.0, value + 0.05), "n": n}

    return {"valid_json_rate": rate(valid), "correct_arguments_rate": rate(correct)}


def test_a_very_low_valid_format_rate_means_sft_first_with_the_numbers_shown():
    advice = recommend(overall(valid=0.02, correct=0.0))
    assert advice.method == SFT
    assert "valid-format rate is very low (2%, 95% CI 0%-7%, n=100)" in advice.reason
    assert advice.evidence["valid_json_rate"]["value"] == 0.02


def test_valid_calls_that_are_almost_never_right_also_mean_sft():
    advice = recommend(overall(valid=0.9, correct=0.01))
    assert advice.method == SFT
    assert "too few successful rollouts" in advice.reason


def test_sometimes_right_but_unreliable_means_grpo():
    advice = recommend(overall(valid=0.8, correct=0.4))
    assert advice.method == GRPO
    assert "40%" in advice.reason


def test_reliably_right_means_no_training_on_these_tasks():
    assert recommend(overall(valid=1.0, correct=0.95)).method == NONE


def test_unmeasured_rates_count_as_not_shown():
    advice = recommend({"valid_json_rate": {"value": None, "low": None, "high": None, "n": 0}})
    assert advice.method == SFT
    assert "not measured" in advice.reason


def test_the_thresholds_can_be_changed():
    strict = RecommendationRules(min_valid_json=0.95)
    assert recommend(overall(valid=0.9, correct=0.5), strict).method == SFT
    assert recommend(overall(valid=0.9, correct=0.5)).method == GRPO
