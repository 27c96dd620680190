"""The analytics tools: visitor lookup, daily counts and averages, and plots.

The visits table is read-only; the only state these tools change is the plots table, one
file path per `create_plot` (`plots/<time_min>_<time_max>_<value>_<plot_type>.png`, as
WorkBench names them), which is what the judge compares for a plotting task. Daily figures
come back as `{date: value}` over the days with visits in range (dates compared as text,
as WorkBench does), in date order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from trainer.environments.workbench.data import Visit
from trainer.environments.workbench.state import WorkbenchState
from trainer.environments.workbench.tools.common import Tool, ToolError

PLOT_VALUES = (
    "total_visits",
    "session_duration_seconds",
    "user_engaged",
    "visits_direct",
    "visits_referral",
    "visits_search_engine",
    "visits_social_media",
)
PLOT_TYPES = ("bar", "line", "scatter", "histogram")


def get_visitor_information_by_id(state: WorkbenchState, visitor_id: str | None = None) -> Any:
    if not visitor_id:
        raise ToolError("Visitor ID not provided.")
    visits = [dict(visit) for visit in state.visits if visit["visitor_id"] == visitor_id]
    if not visits:
        raise ToolError("Visitor not found.")
    return visits


def create_plot(
    state: WorkbenchState,
    time_min: str | None = None,
    time_max: str | None = None,
    value_to_plot: str | None = None,
    plot_type: str | None = None,
) -> Any:
    if not time_min:
        raise ToolError("Start date not provided.")
    if not time_max:
        raise ToolError("End date not provided.")
    if value_to_plot not in PLOT_VALUES:
        raise ToolError(f"Value to plot must be one of {', '.join(repr(value) for value in PLOT_VALUES)}")
    if plot_type not in PLOT_TYPES:
        raise ToolError("Plot type must be one of 'bar', 'line', 'scatter', or 'histogram'")
    file_path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
    state.plots.insert({"file_path": file_path})
    return file_path


def total_visits_count(state: WorkbenchState, time_min: str | None = None, time_max: str | None = None) -> Any:
    return _daily(_in_range(state.visits, time_min, time_max), len)


def engaged_users_count(state: WorkbenchState, time_min: str | None = None, time_max: str | None = None) -> Any:
    return _daily(_in_range(state.visits, time_min, time_max), lambda day: sum(bool(v["user_engaged"]) for v in day))


def traffic_source_count(
    state: WorkbenchState, time_min: str | None = None, time_max: str | None = None, traffic_source: str | None = None
) -> Any:
    visits = _in_range(state.visits, time_min, time_max)
    if not traffic_source:
        return _daily(visits, len)
    return _daily(visits, lambda day: sum(v["traffic_source"] == traffic_source for v in day))


def get_average_session_duration(
    state: WorkbenchState, time_min: str | None = None, time_max: str | None = None
) -> Any:
    def mean(day: list[Visit]) -> float:
        return sum(float(v["session_duration_seconds"]) for v in day) / len(day)

    return _daily(_in_range(state.visits, time_min, time_max), mean)


def _in_range(visits: Iterable[Visit], time_min: str | None, time_max: str | None) -> list[Visit]:
    return [
        visit
        for visit in visits
        if (not time_min or str(visit["date_of_visit"]) >= time_min)
        and (not time_max or str(visit["date_of_visit"]) <= time_max)
    ]


def _daily(visits: list[Visit], figure: Callable[[list[Visit]], Any]) -> dict[str, Any]:
    days: dict[str, list[Visit]] = {}
    for visit in visits:
        days.setdefault(str(visit["date_of_visit"]), []).append(visit)
    return {day: figure(days[day]) for day in sorted(days)}


TOOLS: dict[str, Tool] = {
    "analytics_get_visitor_information_by_id": get_visitor_information_by_id,
    "analytics_create_plot": create_plot,
    "analytics_total_visits_count": total_visits_count,
    "analytics_engaged_users_count": engaged_users_count,
    "analytics_traffic_source_count": traffic_source_count,
    "analytics_get_average_session_duration": get_average_session_duration,
}
