"""The dashboard's plotly figures: pure functions from selector data to a `go.Figure`.

Labels, look and embedding are `flywheel.core.charts`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from flywheel.core.charts import label, layout
from flywheel.dashboards.selectors import BucketCount, DayCount, GroupCount

FAILURE_COLOUR = "#c92a2a"
TOTAL_COLOUR = "#ced4da"
AWAITING_OPACITY = 0.35


def bucket_chart(counts: Sequence[BucketCount]) -> go.Figure:
    """Horizontal bars per bucket: trajectories carrying it, and (faded) those only suggested it."""
    names = [label(count.name) for count in counts]
    colours = [count.colour for count in counts]
    figure = go.Figure(
        [
            go.Bar(
                name="bucketed", y=names, x=[count.assigned for count in counts], orientation="h", marker_color=colours
            ),
            go.Bar(
                name="suggested, awaiting review",
                y=names,
                x=[count.awaiting for count in counts],
                orientation="h",
                marker={"color": colours, "opacity": AWAITING_OPACITY},
            ),
        ]
    )
    empty = not any(count.assigned or count.awaiting for count in counts)
    layout(figure, "Trajectories per failure bucket (faded: suggested, awaiting review)", empty=empty)
    # Each bar has its bucket's colour, so a legend (one swatch per series) would mislead.
    figure.update_layout(barmode="stack", yaxis={"autorange": "reversed"}, showlegend=False)
    return figure


def group_chart(groups: Sequence[GroupCount], *, title: str) -> go.Figure:
    """Failures beside all trajectories per group (an agent, a model version)."""
    labels = [label(group.label) for group in groups]
    figure = go.Figure(
        [
            go.Bar(name="failures", x=labels, y=[group.failures for group in groups], marker_color=FAILURE_COLOUR),
            go.Bar(name="all", x=labels, y=[group.total for group in groups], marker_color=TOTAL_COLOUR),
        ]
    )
    return layout(figure, title, empty=not groups)


def day_chart(days: Sequence[DayCount]) -> go.Figure:
    """Failures per day, stacked by bucket (a trajectory with two buckets counts in both)."""
    series: dict[str, tuple[str, list[DayCount]]] = {}
    for row in days:
        series.setdefault(row.series, (row.colour, []))[1].append(row)
    figure = go.Figure(
        [
            go.Bar(
                name=label(name),
                x=[row.day.isoformat() for row in rows],
                y=[row.count for row in rows],
                marker_color=colour,
            )
            for name, (colour, rows) in series.items()
        ]
    )
    # Days as categories: a date axis with a single day zooms into fractions of a second.
    figure.update_layout(barmode="stack", xaxis={"type": "category", "categoryorder": "category ascending"})
    return layout(figure, "Failures over time, by bucket", empty=not days)
