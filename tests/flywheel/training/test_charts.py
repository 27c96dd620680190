"""The job page's charts: a DPO run's implicit rewards get panels of their own, not the catch-all."""

from __future__ import annotations

from flywheel.training import charts


def test_a_dpo_runs_implicit_rewards_and_log_probabilities_have_their_own_panels():
    series = {name: [(1, 0.0), (2, 0.1)] for name in (
        "loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
        "logps/rejected", "heldout/correct_arguments_rate")}  # fmt: skip
    shown = {chart.key: chart for chart in charts.live_charts(series)}
    assert list(shown) == ["heldout", "preference", "preference_accuracy", "logps", "loss"]  # no "other" catch-all
    assert [trace.name for trace in shown["preference"].figure.data] == [
        charts.label(name) for name in ("rewards/chosen", "rewards/margins", "rewards/rejected")]
