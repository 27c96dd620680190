from __future__ import annotations

import math
from datetime import date

from flywheel.core.charts import error_bars, figure, figure_html, figure_json, layout, step_line


def test_error_bars_reach_each_bound_and_draw_none_where_a_bound_is_missing():
    bars = error_bars([(0.5, 0.25, 0.75), (0.2, None, 0.3), (None, 0.1, 0.9)])
    assert bars["symmetric"] is False
    assert bars["array"] == [0.25, 0.09999999999999998, 0.0]
    assert bars["arrayminus"] == [0.25, 0.0, 0.0]


def test_a_step_line_escapes_its_name_and_keeps_the_points_in_order():
    line = step_line("<b>reward</b>", [(1, 0.5), (2, 0.75)], "#123456")
    assert line["name"] == line["legendgroup"] == "&lt;b&gt;reward&lt;/b&gt;"
    assert line["x"] == [1, 2] and line["y"] == [0.5, 0.75] and line["line"] == {"color": "#123456"}
    assert "line" not in step_line("reward", [(1, 0.5)])  # no colour: the figure's colourway picks one


def test_an_empty_figure_says_so_and_a_diverged_loss_is_json_null():
    chart = layout(figure([step_line("loss", [(1, math.nan)])]), "<i>Loss</i>", empty=True, empty_text="Nothing")
    assert chart["layout"]["title"]["text"] == "&lt;i&gt;Loss&lt;/i&gt;"
    assert chart["layout"]["annotations"][0]["text"] == "Nothing"
    assert figure_json(chart)["data"][0]["y"] == [None]


def test_the_shared_look_lies_under_what_a_figure_says_of_itself():
    chart = layout(figure(yaxis={"range": [0, 1], "gridcolor": "#000"}, showlegend=False), "Rates", empty=False)
    assert chart["layout"]["yaxis"] == {"gridcolor": "#000", "zeroline": False, "range": [0, 1]}
    assert chart["layout"]["xaxis"] == {"gridcolor": "#e9ecef", "zeroline": False}
    assert chart["layout"]["showlegend"] is False and chart["layout"]["height"] == 300
    assert "annotations" not in chart["layout"]


def test_a_figure_embeds_as_plotly_json_with_dates_as_text():
    chart = layout(figure([{"type": "scatter", "x": [date(2026, 1, 2)], "y": [1]}]), "Days", empty=False, height=280)
    markup = figure_html(chart)
    assert '"x":["2026-01-02"]' in markup and "height:280px" in markup and "Plotly.newPlot" in markup
