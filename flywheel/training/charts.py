"""Plotly figures for job pages: pure functions from selector data to a figure dict (no I/O)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go


def metrics_figure(series: dict[str, list[tuple[int, float]]], names: list[str] | None = None) -> dict[str, Any]:
    """One line per metric against the step; `names` picks which (all when None)."""
    figure = go.Figure()
    for name in sorted(names or series):
        points = series.get(name, [])
        figure.add_trace(
            go.Scatter(x=[s for s, _ in points], y=[v for _, v in points], mode="lines+markers", name=name)
        )
    figure.update_layout(
        margin={"l": 40, "r": 10, "t": 10, "b": 40}, height=320, xaxis_title="step", legend={"orientation": "h"},
        template="plotly_white",
    )  # fmt: skip
    return figure.to_plotly_json()
