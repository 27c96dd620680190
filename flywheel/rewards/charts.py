"""Plotly figures for reward profiling: pure functions from selector data to a figure (plotly.js JSON).

Labels, look and embedding are `flywheel.core.charts`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flywheel.core.charts import Figure, error_bars, figure, label, layout
from flywheel.rewards.selectors import ComponentStat

BIN_SIZE = 0.1
REWARD_COLOUR = "#3b5bdb"
OTHER_COLOUR = "#e67700"


def _layout(chart: Figure, title: str, *, empty: bool) -> Figure:
    return layout(chart, title, empty=empty, height=280, empty_text="No outputs")


def _bins(rewards: Sequence[float]) -> dict[str, float]:
    # Bins centred on the tenths, so 0.4, 0.6 and 1.0 (the usual tool_call rewards) each get their own bar.
    low = math.floor(min(rewards, default=0.0) / BIN_SIZE) * BIN_SIZE
    high = math.ceil(max(rewards, default=1.0) / BIN_SIZE) * BIN_SIZE
    return {"start": low - BIN_SIZE / 2, "end": high + BIN_SIZE / 2, "size": BIN_SIZE}


def reward_histogram(rewards: Sequence[float]) -> Figure:
    """How many outputs got each reward, in bins of 0.1."""
    histogram = {"type": "histogram", "x": list(rewards), "xbins": _bins(rewards), "marker": {"color": REWARD_COLOUR},
                 "name": "outputs"}  # fmt: skip
    chart = figure([histogram], xaxis={"title": {"text": "reward"}}, yaxis={"title": {"text": "outputs"}}, bargap=0.05)
    return _layout(chart, f"Reward over {len(rewards)} outputs", empty=not rewards)


def components_chart(stats: Sequence[ComponentStat]) -> Figure:
    """The mean of each reward component, with its range over the outputs as the error bar."""
    bars = {
        "type": "bar", "x": [label(stat.name) for stat in stats], "y": [stat.mean for stat in stats],
        "error_y": error_bars([(stat.mean, stat.minimum, stat.maximum) for stat in stats]),
        "marker": {"color": REWARD_COLOUR}, "hovertemplate": "%{x}: mean %{y:.3f}<extra></extra>",
    }  # fmt: skip
    chart = figure([bars], yaxis={"title": {"text": "mean (bar: min to max)"}})
    return _layout(chart, "Reward components", empty=not stats)


def comparison_histogram(base: Sequence[float], other: Sequence[float], labels: tuple[str, str]) -> Figure:
    """Both runs' reward histograms, overlaid on the same bins."""
    bins = _bins([*base, *other])
    chart = figure(
        [
            {"type": "histogram", "x": list(base), "xbins": bins, "name": label(labels[0]),
             "marker": {"color": REWARD_COLOUR}, "opacity": 0.6},
            {"type": "histogram", "x": list(other), "xbins": bins, "name": label(labels[1]),
             "marker": {"color": OTHER_COLOUR}, "opacity": 0.6},
        ],
        barmode="overlay", xaxis={"title": {"text": "reward"}}, yaxis={"title": {"text": "outputs"}},
    )  # fmt: skip
    return _layout(chart, "Reward before and after", empty=not base and not other)
