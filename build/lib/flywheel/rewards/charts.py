"""Plotly figures for reward profiling: pure functions from selector data to a `go.Figure`.

Labels, look and embedding are `flywheel.core.charts`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from flywheel.core.charts import error_bars, label, layout
from flywheel.rewards.selectors import ComponentStat

BIN_SIZE = 0.1
REWARD_COLOUR = "#3b5bdb"
OTHER_COLOUR = "#e67700"


def _layout(figure: go.Figure, title: str, *, empty: bool) -> go.Figure:
    return layout(figure, title, empty=empty, height=280, empty_text="No outputs")


def _bins(rewards: Sequence[float]) -> dict[str, float]:
    # Bins centred on the tenths, so 0.4, 0.6 and 1.0 (the usual tool_call rewards) each get their own bar.
    low = math.floor(min(rewards, default=0.0) / BIN_SIZE) * BIN_SIZE
    high = math.ceil(max(rewards, default=1.0) / BIN_SIZE) * BIN_SIZE
    return {"start": low - BIN_SIZE / 2, "end": high + BIN_SIZE / 2, "size": BIN_SIZE}


def reward_histogram(rewards: Sequence[float]) -> go.Figure:
    """How many outputs got each reward, in bins of 0.1."""
    figure = go.Figure(go.Histogram(x=list(rewards), xbins=_bins(rewards), marker_color=REWARD_COLOUR, name="outputs"))
    figure.update_layout(xaxis_title="reward", yaxis_title="outputs", bargap=0.05)
    return _layout(figure, f"Reward over {len(rewards)} outputs", empty=not rewards)


def components_chart(stats: Sequence[ComponentStat]) -> go.Figure:
    """The mean of each reward component, with its range over the outputs as the error bar."""
    figure = go.Figure(
        go.Bar(
            x=[label(stat.name) for stat in stats],
            y=[stat.mean for stat in stats],
            error_y=error_bars([(stat.mean, stat.minimum, stat.maximum) for stat in stats]),
            marker_color=REWARD_COLOUR,
            hovertemplate="%{x}: mean %{y:.3f}<extra></extra>",
        )
    )  # fmt: skip
    figure.update_layout(yaxis_title="mean (bar: min to max)")
    return _layout(figure, "Reward components", empty=not stats)


def comparison_histogram(base: Sequence[float], other: Sequence[float], labels: tuple[str, str]) -> go.Figure:
    """Both runs' reward histograms, overlaid on the same bins."""
    bins = _bins([*base, *other])
    figure = go.Figure(
        [
            go.Histogram(x=list(base), xbins=bins, name=label(labels[0]),
                         marker_color=REWARD_COLOUR, opacity=0.6),
            go.Histogram(x=list(other), xbins=bins, name=label(labels[1]),
                         marker_color=OTHER_COLOUR, opacity=0.6),
        ]
    )  # fmt: skip
    figure.update_layout(barmode="overlay", xaxis_title="reward", yaxis_title="outputs")
    return _layout(figure, "Reward before and after", empty=not base and not other)
