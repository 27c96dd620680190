"""The dashboard's plotly figures: pure functions from selector data to a figure (plotly.js JSON).

Labels, look and embedding are `flywheel.core.charts`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from flywheel.core.charts import Figure, figure, label, layout
from flywheel.dashboards.selectors import BucketCount, DayCount, GroupCount

FAILURE_COLOUR = "#c92a2a"
TOTAL_COLOUR = "#ced4da"
AWAITING_OPACITY = 0.35


def bucket_chart(counts: Sequence[BucketCount]) -> Figure:
    """Horizontal bars per bucket: trajectories carrying it, and (faded) those only suggested it."""
    names = [label(count.name) for count in counts]
    colours = [count.colour for count in counts]
    bucketed = {"type": "bar", "name": "bucketed", "y": names, "x": [count.assigned for count in counts],
                "orientation": "h", "marker": {"color": colours}}  # fmt: skip
    awaiting = {"type": "bar", "name": "suggested, awaiting review", "y": names,
                "x": [count.awaiting for count in counts], "orientation": "h",
                "marker": {"color": colours, "opacity": AWAITING_OPACITY}}  # fmt: skip
    # Each bar has its bucket's colour, so a legend (one swatch per series) would mislead.
    chart = figure([bucketed, awaiting], barmode="stack", yaxis={"autorange": "reversed"}, showlegend=False)
    empty = not any(count.assigned or count.awaiting for count in counts)
    return layout(chart, "Trajectories per failure bucket (faded: suggested, awaiting review)", empty=empty)


def group_chart(groups: Sequence[GroupCount], *, title: str) -> Figure:
    """Failures beside all trajectories per group (an agent, a model version)."""
    labels = [label(group.label) for group in groups]
    chart = figure([
        {"type": "bar", "name": "failures", "x": labels, "y": [group.failures for group in groups],
         "marker": {"color": FAILURE_COLOUR}},
        {"type": "bar", "name": "all", "x": labels, "y": [group.total for group in groups],
         "marker": {"color": TOTAL_COLOUR}},
    ])  # fmt: skip
    return layout(chart, title, empty=not groups)


def day_chart(days: Sequence[DayCount]) -> Figure:
    """Failures per day, stacked by bucket (a trajectory with two buckets counts in both)."""
    series: dict[str, tuple[str, list[DayCount]]] = {}
    for row in days:
        series.setdefault(row.series, (row.colour, []))[1].append(row)
    bars = [
        {"type": "bar", "name": label(name), "x": [row.day.isoformat() for row in rows],
         "y": [row.count for row in rows], "marker": {"color": colour}}
        for name, (colour, rows) in series.items()
    ]  # fmt: skip
    # Days as categories: a date axis with a single day zooms into fractions of a second.
    chart = figure(bars, barmode="stack", xaxis={"type": "category", "categoryorder": "category ascending"})
    return layout(chart, "Failures over time, by bucket", empty=not days)
