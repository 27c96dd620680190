"""Plotly figures of the monitor page: pure functions from `selectors.Monitor` data to a figure (plotly.js JSON).

Each figure draws one line per model version tag against the day, and each change of the live
version (a promotion or a rollback) as a vertical line labelled with what went live. Rates carry
their Wilson 95% intervals as error bars. Labels, look and embedding are `flywheel.core.charts`'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from flywheel.core.charts import PALETTE, RATE_AXIS, Figure, Trace, error_bars, figure, label, layout
from flywheel.monitoring.models import MonitoredRate
from flywheel.monitoring.selectors import DayRow, DeploymentMark

MARK_COLOUR = "#495057"
UNTAGGED = "untagged"


def _by_tag(days: Sequence[DayRow]) -> dict[str, list[DayRow]]:
    grouped: dict[str, list[DayRow]] = defaultdict(list)
    for row in days:
        grouped[row.tag or UNTAGGED].append(row)
    return dict(sorted(grouped.items()))


def _marks(chart: Figure, marks: Sequence[DeploymentMark]) -> Figure:
    """Each change of the live version as a dotted vertical line with its label at the top."""
    if not marks:
        return chart
    chart["layout"]["shapes"] = [
        {"type": "line", "x0": mark.at, "x1": mark.at, "y0": 0, "y1": 1, "xref": "x", "yref": "paper",
         "line": {"color": MARK_COLOUR, "width": 1, "dash": "dot"}}
        for mark in marks
    ]  # fmt: skip
    chart["layout"]["annotations"] = [
        {"x": mark.at, "y": 1, "xref": "x", "yref": "paper", "text": label(mark.label), "showarrow": False,
         "yanchor": "bottom", "font": {"size": 10, "color": MARK_COLOUR}}
        for mark in marks
    ]  # fmt: skip
    return chart


def rate_figure(days: Sequence[DayRow], marks: Sequence[DeploymentMark], rate: str) -> Figure:
    """One monitored rate per day and version, with 95% intervals; days where nothing counted are left out."""
    lines: list[Trace] = []
    for number, (tag, rows) in enumerate(_by_tag(days).items()):
        measured = [row for row in rows if row.rates[rate].value is not None]
        if not measured:
            continue
        intervals = [(row.rates[rate].value, row.rates[rate].low, row.rates[rate].high) for row in measured]
        lines.append({
            "type": "scatter", "x": [row.day for row in measured], "y": [row.rates[rate].value for row in measured],
            "mode": "lines+markers", "name": label(tag), "line": {"color": PALETTE[number % len(PALETTE)]},
            "error_y": error_bars(intervals),
            "customdata": [[row.rates[rate].events, row.rates[rate].total] for row in measured],
            "hovertemplate": "%{x}: %{y:.0%} (%{customdata[0]} of %{customdata[1]})<extra>" + label(tag) + "</extra>",
        })  # fmt: skip
    chart = _marks(figure(lines, yaxis=RATE_AXIS), marks)
    title = f"{MonitoredRate(rate).label} per day (95% intervals)"
    return layout(chart, title, empty=not lines, height=280)


def _number_figure(days: Sequence[DayRow], marks: Sequence[DeploymentMark], title: str,
                   series: Sequence[tuple[str, Callable[[DayRow], float | None], str]]) -> Figure:  # fmt: skip
    lines: list[Trace] = []
    for number, (tag, rows) in enumerate(_by_tag(days).items()):
        for suffix, value, dash in series:
            points = [(row.day, value(row)) for row in rows if value(row) is not None]
            if points:
                lines.append({
                    "type": "scatter", "x": [day for day, _ in points], "y": [point for _, point in points],
                    "mode": "lines+markers", "name": label(f"{tag} {suffix}".strip()),
                    "line": {"color": PALETTE[number % len(PALETTE)], "dash": dash},
                })  # fmt: skip
    return layout(_marks(figure(lines), marks), title, empty=not lines, height=280)


def latency_figure(days: Sequence[DayRow], marks: Sequence[DeploymentMark]) -> Figure:
    """Latency p50 (solid) and p95 (dashed) per day and version, in milliseconds."""
    return _number_figure(days, marks, "Latency per day (ms): p50 solid, p95 dashed", [
        ("p50", lambda row: row.usage.latency_p50, "solid"), ("p95", lambda row: row.usage.latency_p95, "dash"),
    ])  # fmt: skip


def tokens_figure(days: Sequence[DayRow], marks: Sequence[DeploymentMark]) -> Figure:
    """Tokens (input and output) per trajectory, per day and version."""
    return _number_figure(days, marks, "Tokens per trajectory", [("", lambda row: row.usage.tokens, "solid")])


def cost_figure(days: Sequence[DayRow], marks: Sequence[DeploymentMark]) -> Figure:
    """Cost per trajectory, per day and version (where the records carry a cost)."""
    return _number_figure(days, marks, "Cost per trajectory", [("", lambda row: row.usage.cost, "solid")])
