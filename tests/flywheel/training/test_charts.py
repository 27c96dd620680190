"""The job page's charts: a DPO run's implicit rewards get panels of their own, not the catch-all."""

from __future__ import annotations

from flywheel.training import charts
from flywheel.training.selectors import BucketRates, Rate
from tests.flywheel.plotly_check import assert_plotly_keeps


def test_a_dpo_runs_implicit_rewards_and_log_probabilities_have_their_own_panels():
    series = {name: [(1, 0.0), (2, 0.1)] for name in (
        "loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
        "logps/rejected", "heldout/correct_arguments_rate")}  # fmt: skip
    shown = {chart.key: chart for chart in charts.live_charts(series)}
    assert list(shown) == ["heldout", "preference", "preference_accuracy", "logps", "loss"]  # no "other" catch-all
    assert [trace["name"] for trace in shown["preference"].figure["data"]] == [
        charts.label(name) for name in ("rewards/chosen", "rewards/margins", "rewards/rejected")
    ]


def test_every_job_chart_is_a_figure_plotly_accepts_with_its_bands_and_rate_axes():
    series = {name: [(1, 0.5), (2, 0.75)] for name in (
        "reward/mean", "reward/std", "reward/tool/mean", "reward/tool/std", "heldout/correct_arguments_rate",
        "kl", "loss", "custom/thing")}  # fmt: skip
    charts_by_key = {chart.key: chart.figure for chart in charts.live_charts(series)}
    assert list(charts_by_key) == ["reward", "components", "heldout", "kl", "loss", "other"]
    upper, lower, mean = charts_by_key["reward"]["data"]
    assert upper["y"] == [1.0, 1.5] and lower["y"] == [0.0, 0.0] and lower["fill"] == "tonexty"
    assert mean["y"] == [0.5, 0.75] and charts_by_key["reward"]["layout"]["xaxis"]["title"]["text"] == "step"
    assert charts_by_key["heldout"]["layout"]["yaxis"]["range"] == [-0.02, 1.05]
    assert "range" not in charts_by_key["kl"]["layout"]["yaxis"]
    rates = [Rate("valid_json_rate", "valid JSON", 0.5, 0.25, 0.75, 8), Rate("mean_reward", "mean", 0.1, 0, 1, 8)]
    figures = [
        *charts_by_key.values(),
        charts.compare_figure([("job 1", [(1, 0.5)]), ("job 2", [])], "kl"),
        charts.rates_figure(rates),
        charts.bucket_figure([BucketRates("wrong_tool", 4, rates)], "valid_json_rate"),
    ]
    assert [bar["y"] for bar in figures[-2]["data"]] == [[0.5]]  # the mean reward is no rate
    assert figures[-3]["layout"]["showlegend"] is True
    for figure in figures:
        assert_plotly_keeps(figure)
