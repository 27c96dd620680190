"""The registry's figures: baseline beside tuned with intervals, curves by step, failure rates per version."""

from __future__ import annotations

from flywheel.registry import charts
from flywheel.registry.selectors import MetricPair, VersionFailures
from tests.flywheel.plotly_check import assert_plotly_keeps

PAIRS = [
    MetricPair(
        "correct_arguments_rate", {"value": 0.5, "low": 0.25, "high": 0.75}, {"value": 0.75, "low": 0.5, "high": 0.9}
    ),
    MetricPair("mean_reward", {"value": 0.1}, {"value": 0.2}),
]


def test_rates_put_the_baseline_beside_the_tuned_with_their_intervals_on_a_rate_axis():
    figure = charts.rates_figure(PAIRS)
    baseline, tuned = figure["data"]
    assert baseline["x"] == tuned["x"] == ["correct arguments"]  # the mean reward is no rate
    assert baseline["y"] == [0.5] and tuned["y"] == [0.75]
    assert tuned["error_y"]["array"] == [0.15000000000000002] and tuned["error_y"]["arrayminus"] == [0.25]
    assert figure["layout"]["yaxis"]["range"] == [0, 1.05] and "annotations" not in figure["layout"]
    assert charts.rates_figure([])["layout"]["annotations"][0]["text"] == "No data yet"


def test_every_registry_figure_is_one_plotly_accepts():
    figures = [
        charts.rates_figure(PAIRS),
        charts.bucket_figure({"<b>wrong</b>": PAIRS, "format": []}),
        charts.reward_figure({"reward/mean": [(1, 0.5), (2, 0.6)]}),
        charts.failures_figure([VersionFailures("shop:v1", None, 10, 4), VersionFailures("shop:v2", None, 0, 0)]),
    ]
    assert figures[1]["data"][0]["x"] == ["&lt;b&gt;wrong&lt;/b&gt;", "format"]
    assert figures[1]["data"][1]["y"] == [0.75, None]
    assert figures[2]["layout"]["xaxis"]["title"]["text"] == "step"
    assert figures[3]["data"][0]["y"] == [0.4, None] and figures[3]["data"][0]["customdata"] == [[4, 10], [0, 0]]
    for figure in figures:
        assert_plotly_keeps(figure)
