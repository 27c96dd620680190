"""What every page's plotly figures share: escaped labels, one look, interval error bars, step lines, embedding.

A figure is plotly.js's own JSON, built as plain dicts (`{"data": [trace, ...], "layout": {...}}`):
plotly's `graph_objects` validate and deep-copy every property they are given, which cost the
dashboards 9 ms and a job page's poll 30 ms (`bench/charts.py`: 5 to 30 times the dicts' time).
Tests check each figure's contents, and that plotly's validation accepts it unchanged.
Pages draw figures with the vendored /static/vendor/plotly.min.js, never a CDN: `figure_html` embeds
one with `include_plotlyjs=False`; the job page's poll hands `figure_json` to `Plotly.react`.
Labels come from stored data (bucket names, model versions, policy names people typed) and plotly
reads a little HTML in labels, so every label goes through `label`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import plotly.io as pio
from django.utils.safestring import SafeString, mark_safe
from plotly.colors import qualitative

PALETTE = qualitative.Plotly
GRID_COLOUR = "#e9ecef"
Interval = tuple[float | None, float | None, float | None]  # (value, low, high)
Trace = dict[str, Any]
Figure = dict[str, Any]
# Axes the pages share: a rate's (0 to 100%, a little headroom for the error bars) and a metric's steps.
# `layout` merges them into new dicts, so no figure holds these ones.
RATE_AXIS: dict[str, Any] = {"range": [0, 1.05], "tickformat": ".0%"}
STEP_AXIS: dict[str, Any] = {"title": {"text": "step"}}


def label(text: str) -> str:
    return html.escape(text, quote=False)


def figure(traces: Iterable[Trace] = (), **layout: Any) -> Figure:
    """A figure of these traces; `layout` as plotly.js reads it (nested dicts, no `marker_color` shorthand)."""
    return {"data": list(traces), "layout": layout}


def _merged(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `changes` laid over it, nested dicts merged key by key (as plotly's `update_layout`)."""
    result = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = _merged(result[key], value)
        else:
            result[key] = value
    return result


def layout(figure: Figure, title: str, *, empty: bool, height: int = 300, empty_text: str = "No data yet") -> Figure:
    """The shared look laid under what the figure's own layout already says."""
    # plotly_white's look set by hand: the named template would add about 6 kB to every figure.
    look = {
        "title": {"text": label(title), "x": 0, "font": {"size": 14}}, "autosize": True, "height": height,
        "margin": {"l": 50, "r": 10, "t": 40, "b": 40}, "paper_bgcolor": "#fff", "plot_bgcolor": "#fff",
        "legend": {"orientation": "h", "x": 0, "y": -0.3, "yanchor": "top"}, "colorway": PALETTE,
        "xaxis": {"gridcolor": GRID_COLOUR, "zeroline": False}, "yaxis": {"gridcolor": GRID_COLOUR, "zeroline": False},
    }  # fmt: skip
    figure["layout"] = _merged(look, figure["layout"])
    if empty:
        figure["layout"].setdefault("annotations", []).append(
            {"text": empty_text, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}
        )
    return figure


def error_bars(intervals: Sequence[Interval]) -> dict[str, Any]:
    """Asymmetric error bars from (value, low, high); a bar with a bound missing gets none."""

    def gap(upper: float | None, lower: float | None) -> float:
        return max(0.0, float(upper) - float(lower)) if upper is not None and lower is not None else 0.0

    return {"type": "data", "symmetric": False, "array": [gap(high, value) for value, _low, high in intervals],
            "arrayminus": [gap(value, low) for value, low, _high in intervals]}  # fmt: skip


def step_line(name: str, points: Sequence[tuple[int, float]], colour: str | None = None) -> Trace:
    """A metric against the step, as a line with markers."""
    name = label(name)
    line: Trace = {"type": "scatter", "x": [step for step, _ in points], "y": [value for _, value in points],
                   "mode": "lines+markers", "name": name, "legendgroup": name}  # fmt: skip
    if colour:
        line["line"] = {"color": colour}
    return line


def figure_html(figure: Figure) -> SafeString:
    """The figure as a <div> and its newPlot call; plotly escapes the data it writes into the script."""
    markup = pio.to_html(
        figure, include_plotlyjs=False, full_html=False, config={"displayModeBar": False, "responsive": True},
        default_height=figure["layout"].get("height") or 300, validate=False,
    )  # fmt: skip
    return mark_safe(markup)  # noqa: S308 - built by plotly from escaped labels and JSON, not raw input


def figure_json(figure: Figure) -> dict[str, Any]:
    """The figure as plain JSON data: plotly's encoder turns NaN (a diverged loss) into null, which JSON allows,
    and dates into ISO text."""
    result: dict[str, Any] = json.loads(pio.to_json(figure, validate=False))
    return result
