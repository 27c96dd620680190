from __future__ import annotations

from flywheel.core.roles import Role
from tests.browser.markers import PAGE
from tests.conftest import PASSWORD

pytestmark = PAGE


def test_signing_in_shows_the_home_page_with_the_navigation(page, live_server, make_user, sign_in):
    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url
    sign_in(make_user(Role.VIEWER), PASSWORD)
    assert page.get_by_role("heading", name="Where the flywheel stands").is_visible()
    sections = page.get_by_role("navigation", name="Sections")
    for label in ["Trajectories", "Triage", "Tasks", "Jobs", "Models", "Dashboards"]:
        assert sections.get_by_text(label).is_visible()
    assert page.evaluate("typeof window.htmx") == "object"
    assert page.get_by_role("link", name="Audit log").count() == 0


def test_the_vendored_plotly_is_served_without_a_cdn(page, live_server):
    response = page.request.get(f"{live_server.url}/static/vendor/plotly.min.js")
    assert response.ok
    assert b"plotly" in response.body()[:2000].lower()


def test_a_new_api_token_is_shown_once_and_can_be_revoked(page, live_server, make_user, sign_in):
    sign_in(make_user(Role.TRAINER), PASSWORD)
    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("ci runner")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#new-token").inner_text()
    assert secret.startswith("fwk_")
    page.get_by_role("button", name="Revoke").click()
    assert page.get_by_text("Token “ci runner” revoked.").is_visible()
    assert secret not in page.content()
