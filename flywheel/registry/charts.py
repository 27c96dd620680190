"""Plotly figures for the registry pages: pure functions from selector data to a figure (plotly.js JSON).

Baseline and candidate side by side per metric and per bucket, with their bootstrap intervals
as error bars; the training job's reward curves; failure rates per model version. Labels, look
and embedding are `flywheel.core.charts`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flywheel.core.charts import (
    RATE_AXIS,
    STEP_AXIS,
    Figure,
    Trace,
    error_bars,
    figure,
    label,
    layout,
    step_line,
)
from flywheel.registry.selectors import MetricPair, VersionFailures

BASELINE_COLOUR = "#adb5bd"
CANDIDATE_COLOUR = "#364fc7"
FAILURE_COLOUR = "#c92a2a"


def _bar(name: str, labels: list[str], entries: Sequence[Mapping[str, object]], colour: str) -> Trace:
    intervals = [(_number(entry.get("value")), _number(entry.get("low")), _number(entry.get("high")))
                 for entry in entries]  # fmt: skip
    return {"type": "bar", "name": name, "x": labels, "y": [value for value, _low, _high in intervals],
            "marker": {"color": colour}, "error_y": error_bars(intervals)}  # fmt: skip


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def rates_figure(pairs: Sequence[MetricPair], title: str = "Held-out rates, baseline vs tuned (95% intervals)",
                 ) -> Figure:  # fmt: skip
    """Grouped bars per rate: the baseline's and the candidate's, each with its interval."""
    rates = [pair for pair in pairs if pair.name.endswith("_rate")]
    labels = [label(pair.name.removesuffix("_rate").replace("_", " ")) for pair in rates]
    chart = figure([
        _bar("baseline", labels, [pair.baseline for pair in rates], BASELINE_COLOUR),
        _bar("tuned", labels, [pair.candidate for pair in rates], CANDIDATE_COLOUR),
    ], yaxis=RATE_AXIS)  # fmt: skip
    empty = not any(isinstance(pair.candidate.get("value"), (int, float)) for pair in rates)
    return layout(chart, title, empty=empty, height=320)


def bucket_figure(by_bucket: Mapping[str, Sequence[MetricPair]], metric: str = "correct_arguments_rate") -> Figure:
    """Grouped bars per failure bucket for one rate, baseline and tuned, with intervals."""
    names = sorted(by_bucket)
    chosen = [next((pair for pair in by_bucket[name] if pair.name == metric), MetricPair(metric, {}, {}))
              for name in names]  # fmt: skip
    labels = [label(name) for name in names]
    chart = figure([
        _bar("baseline", labels, [pair.baseline for pair in chosen], BASELINE_COLOUR),
        _bar("tuned", labels, [pair.candidate for pair in chosen], CANDIDATE_COLOUR),
    ], yaxis=RATE_AXIS)  # fmt: skip
    title = f"{metric.removesuffix('_rate').replace('_', ' ')} per failure bucket"
    return layout(chart, title, empty=not names, height=320)


def reward_figure(curves: Mapping[str, Sequence[tuple[int, float]]]) -> Figure:
    """The training job's reward (and held-out) curves against the step."""
    chart = figure([step_line(name, curves[name]) for name in sorted(curves)], xaxis=STEP_AXIS)
    return layout(chart, "Training curves", empty=not curves, height=320)


def failures_figure(rows: Sequence[VersionFailures]) -> Figure:
    """Failure rate of the trajectories each model version produced, with their counts on hover."""
    ordered = sorted(rows, key=lambda row: (row.version.number if row.version else 0, row.tag))
    chart = figure([{
        "type": "bar", "x": [label(row.tag) for row in ordered], "y": [row.rate for row in ordered],
        "marker": {"color": FAILURE_COLOUR}, "customdata": [[row.failures, row.total] for row in ordered],
        "hovertemplate": "%{x}: %{y:.0%} (%{customdata[0]} of %{customdata[1]})<extra></extra>",
    }], yaxis=RATE_AXIS)  # fmt: skip
    return layout(chart, "Failure rate per model version", empty=not ordered, height=280)
