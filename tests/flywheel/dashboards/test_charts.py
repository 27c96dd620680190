from __future__ import annotations

from datetime import date

from flywheel.core.charts import figure_html
from flywheel.dashboards import charts
from flywheel.dashboards.selectors import BucketCount, DayCount, GroupCount
from tests.flywheel.plotly_check import assert_plotly_keeps


def test_the_bucket_chart_stacks_bucketed_and_awaiting_per_bucket_in_their_colours():
    figure = charts.bucket_chart(
        [BucketCount("Format error", "#e8590c", 3, 1), BucketCount("Wrong tool", "#f59f00", 0, 2)]
    )
    bucketed, awaiting = figure["data"]
    assert bucketed["y"] == ["Format error", "Wrong tool"] and bucketed["x"] == [3, 0]
    assert awaiting["x"] == [1, 2] and bucketed["marker"]["color"] == ["#e8590c", "#f59f00"]
    assert awaiting["marker"]["opacity"] == charts.AWAITING_OPACITY
    assert figure["layout"]["barmode"] == "stack" and "annotations" not in figure["layout"]
    assert figure["layout"]["showlegend"] is False and figure["layout"]["yaxis"]["autorange"] == "reversed"


def test_an_empty_chart_says_so():
    assert (
        charts.bucket_chart([BucketCount("Format error", "#e8590c", 0, 0)])["layout"]["annotations"][0]["text"]
        == "No data yet"
    )
    assert charts.group_chart([], title="Failures per agent")["layout"]["annotations"][0]["text"] == "No data yet"


def test_group_and_day_charts_carry_their_counts():
    groups = charts.group_chart([GroupCount("airline", 116, 200)], title="Failures per agent")
    assert [trace["y"] for trace in groups["data"]] == [[116], [200]]
    days = charts.day_chart(
        [
            DayCount(date(2026, 1, 2), "not bucketed", "#ced4da", 4),
            DayCount(date(2026, 1, 2), "Wrong tool", "#f59f00", 1),
        ]
    )
    assert days["layout"]["barmode"] == "stack" and days["layout"]["xaxis"]["type"] == "category"
    assert [(trace["name"], trace["x"], trace["y"]) for trace in days["data"]] == [
        ("not bucketed", ["2026-01-02"], [4]),
        ("Wrong tool", ["2026-01-02"], [1]),
    ]


def test_labels_from_stored_data_are_escaped_for_plotlys_html_and_the_script():
    hostile = "</script><b>x</b>"
    figure = charts.group_chart([GroupCount(hostile, 1, 1)], title="Failures per model version")
    assert figure["data"][0]["x"] == ["&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;"]
    markup = figure_html(figure)
    assert "</script><b>" not in markup and "Plotly.newPlot" in markup
    assert "plotly.min.js" not in markup and "cdn" not in markup.lower()


def test_plotly_keeps_each_figure_as_built():
    figures = [
        charts.bucket_chart([BucketCount("Format error", "#e8590c", 1, 0)]),
        charts.group_chart([GroupCount("airline", 1, 2)], title="Failures per agent"),
        charts.day_chart([DayCount(date(2026, 1, 2), "Wrong tool", "#f59f00", 1)]),
    ]
    for figure in figures:
        assert_plotly_keeps(figure)
