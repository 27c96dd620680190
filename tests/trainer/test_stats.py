from __future__ import annotations

import pytest

from trainer.stats import bootstrap_interval, mean, mean_interval, paired_difference_interval, percentile


def test_a_constant_sample_has_a_zero_width_interval():
    interval = mean_interval([1.0] * 30)
    assert (interval.value, interval.low, interval.high, interval.n) == (1.0, 1.0, 1.0, 30)


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
