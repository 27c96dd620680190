from __future__ import annotations

import math

import plotly.graph_objects as go

from flywheel.core.charts import error_bars, figure_json, layout, step_line


def test_error_bars_reach_each_bound_and_draw_none_where_a_bound_is_missing():
    bars = error_bars([(0.5, 0.25, 0.75), (0.2, None, 0.3), (None, 0.1, 0.9)])
    assert bars["symmetric"] is False
    assert bars["array"] == [0.25, 0.09999999999999998, 0.0]
    assert bars["arrayminus"] == [0.25, 0.0, 0.0]


def test_a_step_line_escapes_its_name_and_keeps_the_points_in_order():
    line = step_line("<b>reward</b>", [(1, 0.5), (2, 0.75)], "#123456")
    assert line.name == line.legendgroup == "&lt;b&gt;reward&lt;/b&gt;"
    assert list(line.x) == [1, 2] and list(line.y) == [0.5, 0.75] and line.line.color == "#123456"


def test_an_empty_figure_says_so_and_a_diverged_loss_is_json_null():
    figure = layout(go.Figure(step_line("loss", [(1, math.nan)])), "<i>Loss</i>", empty=True, empty_text="Nothing")
    assert figure.layout.title.text == "&lt;i&gt;Loss&lt;/i&gt;"
    assert figure.layout.annotations[0].text == "Nothing"
    assert figure_json(figure)["data"][0]["y"] == [None]
