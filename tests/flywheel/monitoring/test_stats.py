"""The monitor's statistics against known numbers."""

from __future__ import annotations

import pytest

from flywheel.monitoring.stats import Rate, worse_p_value


def test_the_two_proportion_test_gives_the_textbook_p_value():
    # 45/100 against 30/100: pooled 0.375, z = 0.15 / sqrt(0.375 * 0.625 * 0.02) = 2.191, one-sided p = 0.0142.
    p_value = worse_p_value(live=Rate.of(45, 100), before=Rate.of(30, 100), higher_is_worse=True)
    assert p_value == pytest.approx(0.01423, abs=5e-5)


def test_the_test_is_one_sided_in_the_worse_direction():
    worse_success = worse_p_value(live=Rate.of(30, 100), before=Rate.of(45, 100), higher_is_worse=False)
    better_success = worse_p_value(live=Rate.of(45, 100), before=Rate.of(30, 100), higher_is_worse=False)
    assert worse_success == pytest.approx(0.01423, abs=5e-5)
    assert better_success == pytest.approx(1 - 0.01423, abs=5e-5)


def test_equal_rates_give_one_half_and_identical_extremes_give_one():
    assert worse_p_value(live=Rate.of(20, 100), before=Rate.of(10, 50), higher_is_worse=True) == pytest.approx(0.5)
    assert worse_p_value(live=Rate.of(0, 40), before=Rate.of(0, 30), higher_is_worse=True) == 1.0
    assert worse_p_value(live=Rate.of(40, 40), before=Rate.of(30, 30), higher_is_worse=True) == 1.0


def test_all_against_none_on_six_each_is_significant():
    assert worse_p_value(live=Rate.of(6, 6), before=Rate.of(0, 6), higher_is_worse=True) == pytest.approx(
        0.000266, abs=1e-6
    )


def test_an_empty_sample_is_refused():
    with pytest.raises(ValueError):
        worse_p_value(live=Rate.of(0, 0), before=Rate.of(1, 3), higher_is_worse=True)


def test_a_rate_of_nothing_has_no_value_or_interval():
    assert Rate.of(0, 0) == Rate(0, 0, None, None, None)
    rate = Rate.of(3, 10)
    assert (rate.value, round(rate.low, 3), round(rate.high, 3)) == (0.3, 0.108, 0.603)
