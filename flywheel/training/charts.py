"""Plotly figures for the job pages: pure functions from selector data to a figure (plotly.js JSON, no I/O).

The live page draws one chart per panel below, and only the panels the job has data for: an SFT
run has no KL or tied groups, and only a DPO run has implicit rewards. Labels, look and
`figure_json` (what `static/js/jobs.js` hands to `Plotly.react`) are `flywheel.core.charts`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flywheel.core.charts import (
    PALETTE,
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
from flywheel.training.selectors import BucketRates, Rate, Series

BAND_OPACITY = 0.18
_COMPONENT_MEAN = re.compile(r"^reward/(.+)/mean$")
_SPREAD = re.compile(r"^reward/(.+/)?std$")


@dataclass(frozen=True)
class Panel:
    key: str
    title: str
    matches: Callable[[str], bool]


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    figure: Figure


def _rgba(colour: str, opacity: float) -> str:
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red}, {green}, {blue}, {opacity})"


def _band(name: str, mean: Sequence[tuple[int, float]], std: Sequence[tuple[int, float]], colour: str) -> list[Trace]:
    """Mean ± std as a filled band (two edge lines, the lower filled up to the upper), then the mean line."""
    spread = dict(std)
    steps = [(step, value, spread[step]) for step, value in mean if step in spread]
    edge = {"type": "scatter", "x": [s for s, _, _ in steps], "mode": "lines", "line": {"width": 0},
            "legendgroup": label(name), "showlegend": False, "hoverinfo": "skip"}  # fmt: skip
    upper = {**edge, "y": [m + d for _, m, d in steps], "name": label(f"{name} + std")}
    lower = {**edge, "y": [m - d for _, m, d in steps], "name": label(f"{name} − std"), "fill": "tonexty",
             "fillcolor": _rgba(colour, BAND_OPACITY)}  # fmt: skip
    return [upper, lower, step_line(name, mean, colour)] if steps else [step_line(name, mean, colour)]


def reward_figure(series: Series) -> Figure:
    """The training reward: its mean per step with a ±std band over the step's completions."""
    chart = figure(_band("reward/mean", series.get("reward/mean", []), series.get("reward/std", []), PALETTE[0]),
                   xaxis=STEP_AXIS)  # fmt: skip
    return layout(chart, "Training reward (mean ± std)", empty="reward/mean" not in series)


def components_figure(series: Series) -> Figure:
    """Each reward component's mean per step (`reward/<component>/mean`) with its ±std band."""
    components = sorted(match.group(1) for name in series if (match := _COMPONENT_MEAN.match(name)))
    traces: list[Trace] = []
    for number, component in enumerate(components):
        colour = PALETTE[number % len(PALETTE)]
        mean, std = series[f"reward/{component}/mean"], series.get(f"reward/{component}/std", [])
        traces += _band(component, mean, std, colour)
    return layout(figure(traces, xaxis=STEP_AXIS), "Reward components (mean ± std)", empty=not components)


def lines_figure(series: Series, names: Sequence[str], title: str, *, prefix: str = "") -> Figure:
    """One line per metric in `names` against the step, named without `prefix`; rates on a 0–1 axis."""
    shown = [name for name in names if name in series]
    chart = figure([step_line(name.removeprefix(prefix), series[name]) for name in shown], xaxis=STEP_AXIS)
    if shown and all(name.endswith("_rate") for name in shown):
        chart["layout"]["yaxis"] = {"range": [-0.02, 1.05]}
    return layout(chart, title, empty=not shown)


def _is(name: str) -> Callable[[str], bool]:
    return lambda metric: metric == name


def _contains(part: str) -> Callable[[str], bool]:
    return lambda metric: part in metric


# The live page's panels in the order shown; reward and components draw bands, the rest lines.
PANELS: tuple[Panel, ...] = (
    Panel("reward", "Training reward (mean ± std)", _is("reward/mean")),
    Panel("components", "Reward components (mean ± std)", lambda metric: bool(_COMPONENT_MEAN.match(metric))),
    Panel("heldout", "Held-out metrics", lambda metric: metric.startswith("heldout/")),
    Panel("valid", "Valid-output rate", _contains("valid_json")),
    Panel("unsafe", "Unsafe rate", _contains("unsafe")),
    Panel(
        "preference",
        "Implicit rewards of the chosen and rejected answers, and their margin (DPO)",
        lambda metric: metric in ("rewards/chosen", "rewards/rejected", "rewards/margins"),
    ),
    Panel(
        "preference_accuracy",
        "Preference accuracy: pairs whose chosen answer gets the higher reward (DPO)",
        _is("rewards/accuracies"),
    ),
    Panel("logps", "Log-probability of the chosen and rejected answers (DPO)", _contains("logps/")),
    Panel("kl", "KL to the starting policy", _is("kl")),
    Panel("tied", "Tied-group fraction (no reward spread in the group)", _is("tied_group_fraction")),
    Panel("length", "Completion length (tokens)", _is("completion_length")),
    Panel("throughput", "Tokens per second", _is("tokens_per_second")),
    Panel("loss", "Loss", _is("loss")),
)


def live_charts(series: Series) -> list[Chart]:
    """The job page's charts: each panel with data, then one for every metric no panel shows."""
    charts = []
    for panel in PANELS:
        names = sorted(name for name in series if panel.matches(name))
        if not names:
            continue
        if panel.key == "reward":
            figure = reward_figure(series)
        elif panel.key == "components":
            figure = components_figure(series)
        else:
            figure = lines_figure(series, names, panel.title, prefix="heldout/" if panel.key == "heldout" else "")
        charts.append(Chart(panel.key, panel.title, figure))
    shown = {name for name in series for panel in PANELS if panel.matches(name)}
    others = sorted(name for name in series if name not in shown and not _SPREAD.match(name))
    if others:
        charts.append(Chart("other", "Other metrics", lines_figure(series, others, "Other metrics")))
    return charts


def compare_figure(curves: Sequence[tuple[str, Sequence[tuple[int, float]]]], metric: str) -> Figure:
    """One metric's curve per job, on one chart; `curves` are (job label, points)."""
    lines = [step_line(job, points, PALETTE[number % len(PALETTE)]) for number, (job, points) in enumerate(curves)]
    # The legend names the jobs, even where only one has points for this metric.
    chart = figure(lines, xaxis=STEP_AXIS, showlegend=True)
    return layout(chart, metric, empty=not any(points for _, points in curves), height=420)


def _intervals(rates: Sequence[Rate]) -> dict[str, Any]:
    return error_bars([(rate.value, rate.low, rate.high) for rate in rates])


def rates_figure(rates: Sequence[Rate]) -> Figure:
    """An evaluation's rates with their bootstrap 95% intervals as error bars (unmeasured ones left out)."""
    measured = [rate for rate in rates if rate.value is not None and rate.name != "mean_reward"]
    bars = {"type": "bar", "x": [label(rate.label) for rate in measured], "y": [rate.value for rate in measured],
            "error_y": _intervals(measured), "marker": {"color": PALETTE[0]}, "name": "rate"}  # fmt: skip
    return layout(figure([bars], yaxis=RATE_AXIS), "Overall, with 95% intervals", empty=not measured, height=300)


def bucket_figure(buckets: Sequence[BucketRates], metric: str = "correct_arguments_rate") -> Figure:
    """One rate per failure bucket with its 95% interval."""
    rows = [(bucket.bucket, rate) for bucket in buckets for rate in bucket.rates
            if rate.name == metric and rate.value is not None]  # fmt: skip
    bars = {"type": "bar", "x": [label(name) for name, _ in rows], "y": [rate.value for _, rate in rows],
            "error_y": _intervals([rate for _, rate in rows]), "marker": {"color": PALETTE[1]},
            "name": label(metric)}  # fmt: skip
    title = f"{metric.removesuffix('_rate').replace('_', ' ').capitalize()} per failure bucket, with 95% intervals"
    return layout(figure([bars], yaxis=RATE_AXIS), title, empty=not rows, height=300)
