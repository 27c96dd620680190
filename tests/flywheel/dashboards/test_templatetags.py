from __future__ import annotations

import pytest

from flywheel.dashboards.templatetags.dashboards import percent, points


@pytest.mark.parametrize(
    ("value", "shown"), [(0.625, "62.5%"), (0.4, "40%"), (1.0, "100%"), (0.0, "0%"), (0.12345, "12.3%"), (None, "—")]
)
def test_a_rate_shows_as_a_percentage(value, shown):
    assert percent(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"), [(0.22, "+22 pts"), (-0.055, "-5.5 pts"), (0.0, "+0 pts"), (-0.00001, "+0 pts"), (None, "—")]
)
def test_a_gain_shows_in_percentage_points_never_as_minus_zero(value, shown):
    assert points(value) == shown
