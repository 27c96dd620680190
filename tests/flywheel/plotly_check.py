"""A figure as plotly would draw it: the check the chart tests share."""

from __future__ import annotations

import json
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio


def assert_plotly_keeps(figure: dict[str, Any]) -> None:
    """plotly's own validation accepts the figure (it raises on a property plotly.js does not know) and keeps
    every value as given: nothing dropped, renamed or coerced."""
    validated = json.loads(pio.to_json(go.Figure(figure).to_plotly_json(), validate=False))
    validated["layout"].pop("template", None)  # the default template graph_objects adds
    assert validated == json.loads(pio.to_json(figure, validate=False))
