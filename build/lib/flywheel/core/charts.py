"""What every page's plotly figures share: escaped labels, one look, interval error bars, step lines, embedding.

Pages draw figures with the vendored /static/vendor/plotly.min.js, never a CDN: `figure_html` embeds
one with `include_plotlyjs=False`; the job page's poll hands `figure_json` to `Plotly.react`.
Labels come from stored data (bucket names, model versions, policy names people typed) and plotly
reads a little HTML in labels, so every label goes through `label`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from django.utils.safestring import SafeString, mark_safe
from plotly.colors import qualitative

PALETTE = qualitative.Plotly
GRID_COLOUR = "#e9ecef"
Interval = tuple[float | None, float | None, float | None]  # (value, low, high)


def label(text: str) -> str:
    return html.escape(text, quote=False)


def layout(figure: go.Figure, title: str, *, empty: bool, height: int = 300,
           empty_text: str = "No data yet") -> go.Figure:  # fmt: skip
    # plotly_white's look set by hand: the named template would add about 6 kB to every figure.
    figure.update_layout(
        title={"text": label(title), "x": 0, "font": {"size": 14}}, template="none", autosize=True,
        height=height, margin={"l": 50, "r": 10, "t": 40, "b": 40}, paper_bgcolor="#fff", plot_bgcolor="#fff",
        legend={"orientation": "h", "x": 0, "y": -0.3, "yanchor": "top"}, colorway=PALETTE,
    )  # fmt: skip
    figure.update_xaxes(gridcolor=GRID_COLOUR, zeroline=False)
    figure.update_yaxes(gridcolor=GRID_COLOUR, zeroline=False)
    if empty:
        figure.add_annotation(text=empty_text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return figure


def error_bars(intervals: Sequence[Interval]) -> dict[str, Any]:
    """Asymmetric error bars from (value, low, high); a bar with a bound missing gets none."""

    def gap(upper: float | None, lower: float | None) -> float:
        return max(0.0, float(upper) - float(lower)) if upper is not None and lower is not None else 0.0

    return {"type": "data", "symmetric": False, "array": [gap(high, value) for value, _low, high in intervals],
            "arrayminus": [gap(value, low) for value, low, _high in intervals]}  # fmt: skip


def step_line(name: str, points: Sequence[tuple[int, float]], colour: str | None = None) -> go.Scatter:
    """A metric against the step, as a line with markers."""
    name = label(name)
    return go.Scatter(x=[step for step, _ in points], y=[value for _, value in points], mode="lines+markers",
                      name=name, legendgroup=name, line={"color": colour} if colour else None)  # fmt: skip


def figure_html(figure: go.Figure) -> SafeString:
    """The figure as a <div> and its newPlot call; plotly escapes the data it writes into the script."""
    markup = pio.to_html(
        figure, include_plotlyjs=False, full_html=False, config={"displayModeBar": False, "responsive": True},
        default_height=figure.layout.height or 300,
    )  # fmt: skip
    return mark_safe(markup)  # noqa: S308 - built by plotly from escaped labels and JSON, not raw input


def figure_json(figure: go.Figure) -> dict[str, Any]:
    """The figure as plain JSON data: plotly's encoder turns NaN (a diverged loss) into null, which JSON allows."""
    result: dict[str, Any] = json.loads(figure.to_json())
    return result
