"""Embedding the pages' charts: our plain-dict figures against the same figures as plotly `graph_objects`.

    .venv/bin/python -m bench.charts [--rounds 5]

Builds the figures a dashboards page, a monitor page (three versions, thirty days, two promotions),
a gate page and a job page (thirteen metrics, two hundred steps) draw, from the same made-up selector
data, and embeds each as `figure_html` does: once as our dicts (`flywheel.core.charts`), once passed
through `plotly.graph_objects.Figure` first (the reference: what the chart builders did before,
validating and copying every property); the chart tests check that plotly keeps each figure as
built (`tests/flywheel/plotly_check.py`). The sides alternate for a few rounds and the fastest round
of each counts; only the ratio measured in the same run means anything on a noisy machine.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")
import django  # noqa: E402 - settings first: the chart modules import the app's selectors

django.setup()

import plotly.graph_objects as go  # noqa: E402
import plotly.io as pio  # noqa: E402

from flywheel.core.charts import Figure, figure_html  # noqa: E402
from flywheel.dashboards import charts as dashboards  # noqa: E402
from flywheel.dashboards.selectors import BucketCount, DayCount, GroupCount  # noqa: E402
from flywheel.monitoring import charts as monitoring  # noqa: E402
from flywheel.monitoring.models import MonitoredRate  # noqa: E402
from flywheel.monitoring.selectors import DayRow, DeploymentMark, Usage  # noqa: E402
from flywheel.monitoring.stats import Rate as MonitoredValue  # noqa: E402
from flywheel.registry import charts as registry  # noqa: E402
from flywheel.registry.selectors import MetricPair  # noqa: E402
from flywheel.training import charts as training  # noqa: E402

START = date(2026, 11, 1)
COLOURS = ["#e8590c", "#f59f00", "#2f9e44", "#1c7ed6", "#7048e8"]


def dashboards_page() -> list[Figure]:
    buckets = [BucketCount(f"bucket {n}", COLOURS[n], 40 * n, 7 * n) for n in range(5)]
    days = [DayCount(START + timedelta(days=d), f"bucket {n}", COLOURS[n], d + n) for d in range(30) for n in range(5)]
    groups = [GroupCount(f"agent:v{n}", 10 * n, 100 * n) for n in range(1, 6)]
    return [dashboards.bucket_chart(buckets), dashboards.group_chart(groups[:3], title="Failures per agent"),
            dashboards.group_chart(groups, title="Failures per model version"), dashboards.day_chart(days)]  # fmt: skip


def monitor_page() -> list[Figure]:
    def row(day: int, tag: str) -> DayRow:
        rates = {name: MonitoredValue.of(day % 7, 20) for name in MonitoredRate.values}
        return DayRow(START + timedelta(days=day), tag, 20, rates, Usage(300.0 + day, 900.0, 1200.0, 0.01))

    days = [row(day, f"shop:v{version}") for version in range(1, 4) for day in range(30)]
    marks = [DeploymentMark(datetime(2026, 11, d, tzinfo=UTC), f"promote shop:v{n}") for n, d in ((2, 10), (3, 20))]
    figures = [monitoring.rate_figure(days, marks, rate) for rate in MonitoredRate.values]
    return figures + [chart(days, marks) for chart in (monitoring.latency_figure, monitoring.tokens_figure,
                                                       monitoring.cost_figure)]  # fmt: skip


def gate_page() -> list[Figure]:
    pairs = [MetricPair(f"metric_{n}_rate", {"value": 0.4, "low": 0.3, "high": 0.5},
                        {"value": 0.6, "low": 0.5, "high": 0.7}) for n in range(6)]  # fmt: skip
    curves = {"reward/mean": [(step, step / 200) for step in range(200)]}
    return [registry.rates_figure(pairs), registry.bucket_figure({f"bucket {n}": pairs for n in range(5)}),
            registry.reward_figure(curves)]  # fmt: skip


def job_page() -> list[Figure]:
    names = ["reward/mean", "reward/std", "reward/tool/mean", "reward/tool/std", "heldout/valid_json_rate", "kl",
             "loss", "completion_length", "tokens_per_second", "tied_group_fraction", "unsafe_rate", "custom/a",
             "custom/b"]  # fmt: skip
    series = {name: [(step, 0.5 + step / 400) for step in range(200)] for name in names}
    return [chart.figure for chart in training.live_charts(series)]


def embedded_as_dicts(figures: list[Figure]) -> list[str]:
    return [str(figure_html(figure)) for figure in figures]


def embedded_through_graph_objects(figures: list[Figure]) -> list[str]:
    return [pio.to_html(go.Figure(figure), include_plotlyjs=False, full_html=False) for figure in figures]


def fastest(build: Callable[[], list[Figure]], embed: Callable[[list[Figure]], list[str]], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        embed(build())
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pages = {"dashboards": dashboards_page, "monitor": monitor_page, "gate": gate_page, "job": job_page}
    print(f"{'page':<12}{'figures':>8}{'dicts ms':>11}{'graph_objects ms':>18}{'ratio':>9}")
    for name, build in pages.items():
        ours = fastest(build, embedded_as_dicts, args.rounds)
        reference = fastest(build, embedded_through_graph_objects, args.rounds)
        print(f"{name:<12}{len(build()):>8}{ours * 1000:>11.2f}{reference * 1000:>18.2f}{reference / ours:>8.1f}x")


if __name__ == "__main__":
    main()
