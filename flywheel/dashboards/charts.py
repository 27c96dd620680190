"""Pure plotly figure builders: selector data in, a `go.Figure` out, and one function to embed a figure.

Figures are embedded with `include_plotlyjs=False`; pages load the vendored
/static/vendor/plotly.min.js. Labels come from stored data (bucket names, model versions), and
plotly reads a little HTML in labels, so every label is escaped here first.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio
from django.utils.safestring import SafeString, mark_safe

from flywheel.dashboards.selectors import BucketCount, DayCount, GroupCount

FAILURE_COLOUR = "#c92a2a"
TOTAL_COLOUR = "#ced4da"
AWAITING_OPACITY = 0.35


def _label(text: str) -> str:
    return html.escape(text, quote=False)


def _layout(figure: go.Figure, title: str, *, empty: bool) -> go.Figure:
    figure.update_layout(
        title={"text": _label(title), "x": 0, "font": {"size": 14}},
        template="plotly_white",
        autosize=True,
        height=300,
        margin={"l": 40, "r": 10, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    )
    if empty:
        figure.add_annotation(text="No data yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return figure


def bucket_chart(counts: Sequence[BucketCount]) -> go.Figure:
    """Horizontal bars per bucket: trajectories carrying it, and (faded) those only suggested it."""
    names = [_label(count.name) for count in counts]
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
    _layout(figure, "Trajectories per failure bucket (faded: suggested, awaiting review)", empty=empty)
    # Each bar has its bucket's colour, so a legend (one swatch per series) would mislead.
    figure.update_layout(barmode="stack", yaxis={"autorange": "reversed"}, showlegend=False)
    return figure


def group_chart(groups: Sequence[GroupCount], *, title: str) -> go.Figure:
    """Failures beside all trajectories per group (an agent, a model version)."""
    labels = [_label(group.label) for group in groups]
    figure = go.Figure(
        [
            go.Bar(name="failures", x=labels, y=[group.failures for group in groups], marker_color=FAILURE_COLOUR),
            go.Bar(name="all", x=labels, y=[group.total for group in groups], marker_color=TOTAL_COLOUR),
        ]
    )
    return _layout(figure, title, empty=not groups)


def day_chart(days: Sequence[DayCount]) -> go.Figure:
    """Failures per day, stacked by bucket (a trajectory with two buckets counts in both)."""
    series: dict[str, tuple[str, list[DayCount]]] = {}
    for row in days:
        series.setdefault(row.series, (row.colour, []))[1].append(row)
    figure = go.Figure(
        [
            go.Bar(
                name=_label(name),
                x=[row.day.isoformat() for row in rows],
                y=[row.count for row in rows],
                marker_color=colour,
            )
            for name, (colour, rows) in series.items()
        ]
    )
    # Days as categories: a date axis with a single day zooms into fractions of a second.
    figure.update_layout(barmode="stack", xaxis={"type": "category", "categoryorder": "category ascending"})
    return _layout(figure, "Failures over time, by bucket", empty=not days)


def figure_html(figure: go.Figure) -> SafeString:
    """The figure as a <div> and its newPlot call; plotly escapes the data it writes into the script."""
    markup = pio.to_html(
        figure,
        include_plotlyjs=False,
        full_html=False,
        config={"displayModeBar": False, "responsive": True},
        default_height=figure.layout.height or 300,
    )
    return mark_safe(markup)  # noqa: S308 - built by plotly from escaped labels and JSON, not raw input
