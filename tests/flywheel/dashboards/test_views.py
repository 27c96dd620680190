from __future__ import annotations

import pytest
from django.urls import reverse

from flywheel.core.roles import Role

pytestmark = pytest.mark.django_db


def test_the_home_page_has_triage_tiles_and_the_bucket_chart(client, make_user, tau_airline):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("dashboards:home")).content.decode()
    assert '<span class="figure" data-count="unreviewed-failures">116</span>' in page
    assert "Plotly.newPlot" in page and "Incomplete execution" in page
    assert "/static/vendor/plotly.min.js" in page


def test_the_dashboards_page_has_four_charts(client, make_user, tau_airline):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("dashboards:index")).content.decode()
    assert page.count("Plotly.newPlot(") == 4
    for title in ("per failure bucket", "Failures per agent", "Failures per model version", "Failures over time"):
        assert title in page
