"""The analytics tools: daily figures over WorkBench's visits, and plots as named file paths."""

from __future__ import annotations

import pytest

from trainer.environments.workbench.tools import ToolError
from trainer.environments.workbench.tools.analytics import (
    create_plot,
    engaged_users_count,
    get_average_session_duration,
    get_visitor_information_by_id,
    total_visits_count,
    traffic_source_count,
)


def visits_on(state, day):
    return [visit for visit in state.visits if visit["date_of_visit"] == day]


def test_a_visitor_lookup_returns_each_visit_with_engagement_as_a_boolean(state):
    [visit] = get_visitor_information_by_id(state, "0860")
    assert visit == {
        "date_of_visit": "2023-10-22",
        "visitor_id": "0860",
        "page_views": "8",
        "session_duration_seconds": "4",
        "traffic_source": "referral",
        "user_engaged": False,
    }
    with pytest.raises(ToolError, match="Visitor not found."):
        get_visitor_information_by_id(state, "nobody")


def test_daily_counts_cover_the_inclusive_range_in_date_order(state):
    counts = total_visits_count(state, "2023-11-27", "2023-11-29")
    assert list(counts) == ["2023-11-27", "2023-11-28", "2023-11-29"]
    assert counts["2023-11-28"] == len(visits_on(state, "2023-11-28"))
    assert sum(total_visits_count(state).values()) == len(state.visits)


def test_engaged_users_source_counts_and_average_duration_are_per_day(state):
    day = visits_on(state, "2023-11-28")
    assert engaged_users_count(state, "2023-11-28", "2023-11-28") == {"2023-11-28": sum(v["user_engaged"] for v in day)}
    direct = sum(v["traffic_source"] == "direct" for v in day)
    assert traffic_source_count(state, "2023-11-28", "2023-11-28", "direct") == {"2023-11-28": direct}
    mean = sum(float(v["session_duration_seconds"]) for v in day) / len(day)
    assert get_average_session_duration(state, "2023-11-28", "2023-11-28") == {"2023-11-28": pytest.approx(mean)}


def test_a_plot_is_recorded_under_workbenchs_file_name(state):
    path = create_plot(state, "2023-11-01", "2023-11-29", "total_visits", "bar")
    assert path == "plots/2023-11-01_2023-11-29_total_visits_bar.png"
    assert [dict(row) for row in state.plots.values()] == [{"file_path": path}]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("", "2023-11-29", "total_visits", "bar"), "Start date not provided."),
        (("2023-11-01", "2023-11-29", "visits", "bar"), "Value to plot must be one of"),
        (("2023-11-01", "2023-11-29", "total_visits", "pie"), "Plot type must be one of"),
    ],
)
def test_a_bad_plot_is_refused_and_not_recorded(state, arguments, message):
    with pytest.raises(ToolError, match=message):
        create_plot(state, *arguments)
    assert list(state.plots.values()) == []
