from __future__ import annotations

import pytest

from trainer.spec.stats import (
    bootstrap_interval,
    mean,
    mean_interval,
    paired_difference_interval,
    percentile,
    rate_interval,
    wilson_interval,
)


def test_a_constant_sample_has_a_zero_width_bootstrap_interval():
    # Why rates use Wilson instead: resampling 30 passes can only ever give 30 passes.
    interval = mean_interval([1.0] * 30)
    assert (interval.value, interval.low, interval.high, interval.n) == (1.0, 1.0, 1.0, 30)


def test_a_rate_of_none_or_all_gets_a_wilson_interval_that_is_not_zero_wide():
    none = rate_interval([0.0] * 41)
    assert (none.value, none.low, none.n) == (0.0, 0.0, 41)
    assert none.high == pytest.approx(0.0857, abs=1e-4)  # Clopper-Pearson: 0.086
    every = wilson_interval(30, 30)
    assert every.high == 1.0 and every.low == pytest.approx(1 - 0.1135, abs=1e-4)
    assert wilson_interval(1, 1).low == pytest.approx(0.2065, abs=1e-4)


def test_wilson_matches_the_textbook_values_and_stays_inside_zero_and_one():
    half = wilson_interval(15, 30)
    assert (half.low, half.high) == (pytest.approx(0.3315, abs=1e-4), pytest.approx(0.6685, abs=1e-4))
    for successes in range(0, 11):
        interval = wilson_interval(successes, 10)
        assert 0.0 <= interval.low <= interval.value <= interval.high <= 1.0 and interval.high > interval.low
    assert wilson_interval(3, 10, confidence=0.99).high > wilson_interval(3, 10).high


def test_a_rate_interval_refuses_values_other_than_zero_and_one_and_is_none_when_empty():
    assert rate_interval([]) is None
    with pytest.raises(ValueError, match="0 or 1"):
        rate_interval([0.5, 1.0])
    with pytest.raises(ValueError, match="at least one task"):
        wilson_interval(0, 0)


def test_a_rate_interval_brackets_the_rate_and_stays_within_zero_and_one():
    values = [1.0] * 30 + [0.0] * 70
    interval = mean_interval(values, seed=3)
    assert interval.value == pytest.approx(0.3)
    assert 0.0 <= interval.low < 0.3 < interval.high <= 1.0


def test_the_interval_narrows_as_the_sample_grows():
    small = mean_interval([1.0, 0.0] * 10)
    large = mean_interval([1.0, 0.0] * 500)
    assert (large.high - large.low) < (small.high - small.low) / 3


def test_the_same_seed_gives_the_same_interval():
    values = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert mean_interval(values, seed=7) == mean_interval(values, seed=7)


def test_paired_resampling_keeps_pairs_together():
    before = [float(i % 2) for i in range(50)]
    after = [value + 0.1 for value in before]
    # Resampled together, every row differs by exactly 0.1; resampled apart, the spread would be wide.
    interval = paired_difference_interval(after, before)
    assert interval.value == pytest.approx(0.1)
    assert interval.low == pytest.approx(0.1) and interval.high == pytest.approx(0.1)


def test_bootstrap_takes_any_statistic():
    interval = bootstrap_interval(lambda column: max(column), [[1.0, 2.0, 3.0]], resamples=200)
    assert interval.value == 3.0
    assert 1.0 <= interval.low <= interval.high == 3.0


def test_an_empty_sample_has_no_interval():
    assert mean_interval([]) is None


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference_interval([1.0, 2.0], [1.0])


def test_percentiles_interpolate_between_order_statistics():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([7.0], 95) == 7.0
    assert mean([1.0, 2.0]) == 1.5
