"""Correcting a failing step in a real Chromium with the keyboard only: c on the review page, edit, Ctrl+Enter."""

from __future__ import annotations

import pytest

from flywheel.core.roles import Role
from flywheel.datasets.models import PreferencePair
from flywheel.triage.models import Correction
from tests.browser.markers import PAGE
from tests.conftest import PASSWORD
from tests.flywheel.triage.conftest import built_in_buckets, call, result, shop_record, store, user  # noqa: F401

pytestmark = [*PAGE, pytest.mark.usefixtures("built_in_buckets")]


def test_a_reviewer_corrects_the_failing_call_with_the_keyboard(page, live_server, make_user, sign_in, store):  # noqa: F811
    steps = [user(), call("refund_order", {"order_id": "17", "amount": 500}, "c1"),
             result("refund_order", "Error: more than the order's total", error=True, call_id="c1")]  # fmt: skip
    refund = store(shop_record("refund-1", steps))["refund-1"]
    sign_in(make_user(Role.REVIEWER), PASSWORD)
    page.goto(f"{live_server.url}/triage/review/{refund.pk}/")
    page.wait_for_load_state()  # triage.js (deferred) has bound its keys
    current = page.locator(".trace > li.step.current")
    for _ in range(3):  # to the refund call, step #1 (the page opens on the step a suggestion marked, if any)
        at = int(current.get_attribute("id").removeprefix("step-")) if current.count() else -1
        if at == 1:
            break
        page.keyboard.press("j" if at < 1 else "k")
    page.keyboard.press("c")
    page.wait_for_url(f"**/triage/review/{refund.pk}/correct/?step=1")
    page.wait_for_load_state()
    tool = page.locator("select[name=tool]")
    assert tool.evaluate("element => element === document.activeElement")
    assert tool.input_value() == "refund_order"
    page.keyboard.press("ArrowUp")  # the catalogue is sorted: lookup_order comes first
    page.keyboard.press("Tab")
    page.keyboard.press("Control+a")
    page.keyboard.type('{"order_id": 17}')
    page.keyboard.press("Control+Enter")
    assert page.locator("p.error").first.inner_text().endswith("argument 'order_id' must be string, got integer")
    assert not Correction.objects.exists()

    page.locator("textarea[name=arguments]").focus()
    page.keyboard.press("Control+a")
    page.keyboard.type('{"order_id": "17"}')
    page.keyboard.press("Control+Enter")
    page.wait_for_url(f"**/triage/review/{refund.pk}/")
    assert "Correction of step #1 saved: a train preference pair." in page.locator("ul.messages").inner_text()
    assert page.locator("table.corrections").is_visible()
    pair = PreferencePair.objects.get()
    assert pair.chosen[0]["tool_calls"][0]["function"] == {"name": "lookup_order", "arguments": {"order_id": "17"}}
