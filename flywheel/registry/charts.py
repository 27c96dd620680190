"""Plotly figures for the registry pages: pure functions from selector data to a `go.Figure`.

Baseline and candidate side by side per metric and per bucket, with their bootstrap intervals
as error bars; the training job's reward curves; failure rates per model version. Embedding
(`include_plotlyjs=False`, the vendored plotly.js) is `flywheel.dashboards.charts.figure_html`.
Labels come from stored data, so they are escaped (plotly reads a little HTML in labels).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from flywheel.registry.selectors import MetricPair, VersionFailures

BASELINE_COLOUR = "#adb5bd"
CANDIDATE_COLOUR = "#364fc7"
FAILURE_COLOUR = "#c92a2a"


def _label(text: str) -> str:
    return html.escape(text, quote=False)


def _layout(figure: go.Figure, title: str, *, empty: bool, height: int = 320) -> go.Figure:
    figure.update_layout(
        title={"text": _label(title), "x": 0, "font": {"size": 14}}, template="plotly_white", autosize=True,
        height=height, margin={"l": 50, "r": 10, "t": 40, "b": 60}, legend={"orientation": "h", "y": -0.25},
        barmode="group",
    )  # fmt: skip
    if empty:
        figure.add_annotation(text="No data yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return figure


def _bar(name: str, labels: list[str], entries: Sequence[Mapping[str, object]], colour: str) -> go.Bar:
    values = [entry.get("value") for entry in entries]
    plus = [_gap(entry.get("high"), entry.get("value")) for entry in entries]
    minus = [_gap(entry.get("value"), entry.get("low")) for entry in entries]
    return go.Bar(name=name, x=labels, y=values, marker_color=colour,
                  error_y={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus})  # fmt: skip


def _gap(upper: object, lower: object) -> float:
    if isinstance(upper, (int, float)) and isinstance(lower, (int, float)):
        return max(0.0, float(upper) - float(lower))
    return 0.0


def rates_figure(pairs: Sequence[MetricPair], title: str = "Held-out rates, baseline vs tuned (95% intervals)",
                 ) -> go.Figure:  # fmt: skip
    """Grouped bars per rate: the baseline's and the candidate's, each with its interval."""
    rates = [pair for pair in pairs if pair.name.endswith("_rate")]
    labels = [_label(pair.name.removesuffix("_rate").replace("_", " ")) for pair in rates]
    figure = go.Figure([
        _bar("baseline", labels, [pair.baseline for pair in rates], BASELINE_COLOUR),
        _bar("tuned", labels, [pair.candidate for pair in rates], CANDIDATE_COLOUR),
    ])  # fmt: skip
    figure.update_yaxes(range=[0, 1.05], tickformat=".0%")
    empty = not any(isinstance(pair.candidate.get("value"), (int, float)) for pair in rates)
    return _layout(figure, title, empty=empty)


def bucket_figure(by_bucket: Mapping[str, Sequence[MetricPair]], metric: str = "correct_arguments_rate") -> go.Figure:
    """Grouped bars per failure bucket for one rate, baseline and tuned, with intervals."""
    names = sorted(by_bucket)
    chosen = [next((pair for pair in by_bucket[name] if pair.name == metric), MetricPair(metric, {}, {}))
              for name in names]  # fmt: skip
    labels = [_label(name) for name in names]
    figure = go.Figure([
        _bar("baseline", labels, [pair.baseline for pair in chosen], BASELINE_COLOUR),
        _bar("tuned", labels, [pair.candidate for pair in chosen], CANDIDATE_COLOUR),
    ])  # fmt: skip
    figure.update_yaxes(range=[0, 1.05], tickformat=".0%")
    title = f"{metric.removesuffix('_rate').replace('_', ' ')} per failure bucket"
    return _layout(figure, title, empty=not names)


def reward_figure(curves: Mapping[str, Sequence[tuple[int, float]]]) -> go.Figure:
    """The training job's reward (and held-out) curves against the step."""
    figure = go.Figure()
    for name in sorted(curves):
        points = curves[name]
        figure.add_trace(go.Scatter(x=[step for step, _ in points], y=[value for _, value in points],
                                    mode="lines+markers", name=_label(name)))  # fmt: skip
    figure.update_xaxes(title_text="step")
    return _layout(figure, "Training curves", empty=not curves)


def failures_figure(rows: Sequence[VersionFailures]) -> go.Figure:
    """Failure rate of the trajectories each model version produced, with their counts on hover."""
    ordered = sorted(rows, key=lambda row: (row.version.number if row.version else 0, row.tag))
    figure = go.Figure(go.Bar(
        x=[_label(row.tag) for row in ordered], y=[row.rate for row in ordered], marker_color=FAILURE_COLOUR,
        customdata=[[row.failures, row.total] for row in ordered],
        hovertemplate="%{x}: %{y:.0%} (%{customdata[0]} of %{customdata[1]})<extra></extra>",
    ))  # fmt: skip
    figure.update_yaxes(range=[0, 1.05], tickformat=".0%")
    return _layout(figure, "Failure rate per model version", empty=not ordered, height=280)
