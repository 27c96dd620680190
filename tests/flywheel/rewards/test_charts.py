from __future__ import annotations

import pytest

from flywheel.rewards import charts
from flywheel.rewards.selectors import ComponentStat
from tests.flywheel.plotly_check import assert_plotly_keeps


def test_the_histogram_bins_rewards_by_tenths_centred_on_them():
    figure = charts.reward_histogram([-1.0, 0.6, 0.6, 1.0])
    trace = figure["data"][0]
    assert trace["x"] == [-1.0, 0.6, 0.6, 1.0]
    assert trace["xbins"]["size"] == 0.1 and trace["xbins"]["start"] < -1.0 < trace["xbins"]["start"] + 0.1
    assert figure["layout"]["title"]["text"] == "Reward over 4 outputs" and "annotations" not in figure["layout"]
    assert figure["layout"]["xaxis"]["title"]["text"] == "reward"
    assert_plotly_keeps(figure)


def test_an_empty_run_says_so():
    assert charts.reward_histogram([])["layout"]["annotations"][0]["text"] == "No outputs"
    assert charts.components_chart([])["layout"]["annotations"][0]["text"] == "No outputs"


def test_the_components_chart_shows_means_with_their_range_and_escapes_names():
    stats = [ComponentStat("tool", 0.3, 0.0, 0.4, 10), ComponentStat("<b>x</b>", -0.25, -1.0, 0.0, 10)]
    chart = charts.components_chart(stats)
    bar = chart["data"][0]
    assert bar["y"] == [0.3, -0.25] and bar["x"] == ["tool", "&lt;b&gt;x&lt;/b&gt;"]
    assert bar["error_y"]["array"] == pytest.approx([0.1, 0.25]) and bar["error_y"]["arrayminus"] == [0.3, 0.75]
    assert_plotly_keeps(chart)


def test_the_comparison_overlays_both_runs_on_the_same_bins():
    figure = charts.comparison_histogram([1.0, 0.6], [0.8, 0.4], ("before: <default>", "after: strict"))
    before, after = figure["data"]
    assert before["xbins"] == after["xbins"] and figure["layout"]["barmode"] == "overlay"
    assert before["name"] == "before: &lt;default&gt;" and after["x"] == [0.8, 0.4]
    assert_plotly_keeps(figure)
