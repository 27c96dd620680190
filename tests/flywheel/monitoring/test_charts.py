"""The monitor's figures: a line per version with intervals, and each change of the live version drawn."""

from __future__ import annotations

from datetime import UTC, date, datetime

from flywheel.monitoring import charts
from flywheel.monitoring.models import MonitoredRate
from flywheel.monitoring.selectors import DayRow, DeploymentMark, Usage
from flywheel.monitoring.stats import Rate
from tests.flywheel.plotly_check import assert_plotly_keeps

MARKS = [DeploymentMark(datetime(2025, 3, 2, 12, tzinfo=UTC), "promote → v2")]


def day(number: int, tag: str, unsafe: tuple[int, int], latency: float | None = None) -> DayRow:
    rates = {name: Rate.of(0, 0) for name in MonitoredRate.values}
    rates[MonitoredRate.UNSAFE] = Rate.of(*unsafe)
    return DayRow(date(2025, 3, number), tag, unsafe[1], rates, Usage(latency, latency and 2 * latency, 120.0, None))


DAYS = [day(1, "shop:v1", (0, 10), 300.0), day(2, "shop:v1", (1, 10), 310.0), day(2, "shop:v2", (4, 5)),
        day(3, "shop:v2", (5, 5))]  # fmt: skip


def test_a_rate_figure_draws_each_version_with_its_intervals_and_the_promotion():
    figure = charts.rate_figure(DAYS, MARKS, MonitoredRate.UNSAFE)
    assert [trace["name"] for trace in figure["data"]] == ["shop:v1", "shop:v2"]
    assert figure["data"][1]["y"] == [0.8, 1.0] and figure["data"][1]["customdata"][0] == [4, 5]
    assert figure["data"][1]["error_y"]["arrayminus"][1] > 0 and figure["data"][1]["error_y"]["array"][1] == 0
    [shape] = figure["layout"]["shapes"]
    assert shape["x0"] == shape["x1"] == MARKS[0].at and shape["yref"] == "paper"
    assert [note["text"] for note in figure["layout"]["annotations"]] == ["promote → v2"]
    assert figure["layout"]["yaxis"]["tickformat"] == ".0%"
    assert_plotly_keeps(figure)


def test_days_where_nothing_counted_are_left_out_and_an_empty_figure_says_so():
    figure = charts.rate_figure(DAYS, [], MonitoredRate.SUCCESS)
    assert figure["data"] == [] and figure["layout"]["annotations"][0]["text"] == "No data yet"
    assert "shapes" not in figure["layout"] and len(figure["layout"]["annotations"]) == 1  # no mark, no line


def test_latency_draws_p50_and_p95_per_version_with_data():
    figure = charts.latency_figure(DAYS, MARKS)
    assert [trace["name"] for trace in figure["data"]] == ["shop:v1 p50", "shop:v1 p95"]
    assert figure["data"][1]["y"] == [600.0, 620.0] and figure["data"][1]["line"]["dash"] == "dash"
    assert len(charts.tokens_figure(DAYS, MARKS)["data"]) == 2 and charts.cost_figure(DAYS, MARKS)["data"] == []
    assert_plotly_keeps(figure)
