"""Reading the pages' plotly charts only once plotly has drawn them.

A page's load event says nothing about its charts: plotly may draw after it (`Plotly.newPlot` and
`Plotly.react` finish asynchronously, and the job pages draw from a fetch), and a chart read before
then has no `data` yet. Every test that looks at a chart waits here first.

The charts are the three kinds of graph div the app makes: `figure_html`'s `.plotly-graph-div`
(drawn by their inline script), jobs.js's `[data-figure]` (drawn from a json_script) and the
`.plot` inside each of the live `[data-chart]` panels. Not covered: what a chart looks like.
"""

from __future__ import annotations

from typing import Any

CHARTS = ".plotly-graph-div, [data-figure], [data-chart] .plot"

# Drawn: plotly has given the div its traces (possibly none: an empty chart) and its svg.
_DRAWN = """([selector, minimum]) => {
    const charts = [...document.querySelectorAll(selector)];
    return charts.length >= minimum
        && charts.every((chart) => Array.isArray(chart.data) && chart.querySelector('.main-svg') !== null);
}"""


def wait_for_charts(page: Any, *, minimum: int = 1, timeout: float | None = None) -> int:
    """Wait until the page holds at least `minimum` charts and plotly has drawn every one; how many there are.

    `minimum=0` waits for the charts the page has, if any (a page with none passes at once).
    """
    page.wait_for_function(_DRAWN, arg=[CHARTS, minimum], timeout=timeout)
    count: int = page.locator(CHARTS).count()
    return count


def chart_data(page: Any, index: int = 0) -> list[dict[str, Any]]:
    """The traces plotly drew in the page's `index`th chart (document order), once it has drawn them."""
    wait_for_charts(page, minimum=index + 1)
    traces: list[dict[str, Any]] = page.evaluate(
        "([selector, index]) => document.querySelectorAll(selector)[index].data", [CHARTS, index]
    )
    return traces
