"""An approver in the browser: reads a gate's reasons, promotes, rolls back, and finds both in the history."""

from __future__ import annotations

from flywheel.core.roles import Role
from flywheel.registry import selectors
from flywheel.registry.models import Deployment
from tests.browser.markers import PAGE
from tests.browser.screenshots import shot
from tests.conftest import PASSWORD
from tests.flywheel.registry.conftest import adapters as adapters  # noqa: F401
from tests.flywheel.registry.conftest import agent as agent  # noqa: F401
from tests.flywheel.registry.conftest import heldout_snapshot as heldout_snapshot  # noqa: F401
from tests.flywheel.registry.conftest import register as register  # noqa: F401
from tests.flywheel.registry.conftest import registry_dir as registry_dir  # noqa: F401
from tests.flywheel.registry.gate_reports import WINNING, gate_files
from tests.flywheel.registry.test_services import finished_gate

pytestmark = PAGE


def test_an_approver_promotes_on_a_passed_gate_then_rolls_back_and_the_history_has_both(
    page, sign_in, live_server, make_user, register, heldout_snapshot, tmp_path
):
    first = register(0)
    second = register(1, parent=first)
    finished_gate(second, heldout_snapshot, gate_files(tmp_path, *WINNING))
    sign_in(make_user(Role.APPROVER, username="ada"), PASSWORD)

    page.goto(f"{live_server.url}/models/support-bot/v2/")
    page.get_by_text("above zero").first.wait_for()
    shot(page, "version")
    page.get_by_role("button", name="Promote support-bot:v2").click()
    page.get_by_text("support-bot:v2 is live.").wait_for()  # back on the agent's page
    assert selectors.live_version(agent=second.agent) == second

    page.get_by_label("Reason").fill("production disagrees: more escalations since v2")
    page.get_by_role("button", name="Roll back from support-bot:v2").click()
    page.get_by_text("Rolled back to support-bot:v1.").wait_for()
    history = page.locator("table.history tbody tr")
    shot(page, "history")
    assert history.count() == 2
    assert "Roll back" in history.nth(0).inner_text() and "production disagrees" in history.nth(0).inner_text()
    assert "Promote" in history.nth(1).inner_text() and "Passed" in history.nth(1).inner_text()
    assert selectors.live_version(agent=first.agent) == first
    assert Deployment.objects.filter(actor_name="ada").count() == 2
