"""Reward profiling in a real Chromium: a trainer profiles tool_call on 100 sampled outputs of real
BFCL tasks, marks scores with the keyboard and the mouse, re-verifies under a stricter policy and
reads the comparison."""

from __future__ import annotations

import json

from flywheel.core.roles import Role
from flywheel.rewards.models import Mark, ProfiledOutput, ProfileRun
from tests.browser.charts import wait_for_charts
from tests.browser.markers import PAGE
from tests.browser.screenshots import shot
from tests.conftest import PASSWORD
from tests.flywheel.rewards.conftest import STRICT_POLICY, outputs_lines
from tests.flywheel.rewards.conftest import bfcl_many as bfcl_many  # noqa: F401  (a shared fixture)
from tests.flywheel.rewards.conftest import fast_password_hashing as fast_password_hashing  # noqa: F401

pytestmark = PAGE


def rate(page) -> str:
    return page.locator("[data-agreement-rate]").inner_text()


def test_a_trainer_profiles_100_outputs_marks_them_and_reverifies_under_a_stricter_policy(
    page, live_server, make_user, sign_in, bfcl_many, tmp_path
):
    outputs = tmp_path / "bfcl-outputs.jsonl"
    outputs.write_text("\n".join(outputs_lines(bfcl_many)) + "\n")
    sign_in(make_user(Role.TRAINER), PASSWORD)

    # Profile: the Rewards link in the top bar, then the form.
    page.get_by_role("link", name="Rewards").click()
    page.get_by_role("link", name="Profile a reward").click()
    page.get_by_label("Snapshot").select_option(str(bfcl_many.id))
    page.locator("input[type=file][name=outputs]").set_input_files(str(outputs))
    page.get_by_label("Sample size").fill("100")
    page.get_by_label("Seed").fill("11")
    page.get_by_role("button", name="Sample and score").click()
    page.wait_for_url("**/rewards/*/")
    run = ProfileRun.objects.get()
    assert run.outputs.count() == 100
    assert page.locator("#outputs > li.output").count() == 100
    assert page.get_by_text("Reward over 100 outputs").is_visible()
    assert wait_for_charts(page, minimum=2) == 2  # the histogram and the components drawn by plotly.js
    assert rate(page) == "—"
    shot(page, "rewards-profile", full_page=False)
    page.wait_for_load_state()  # rewards.js (deferred) has bound its keys

    # Mark with the keyboard: agree, agree, then a note and disagree on the third.
    first, second, third = (page.locator("#outputs > li.output").nth(n) for n in range(3))
    ids = [int(row.get_attribute("data-output")) for row in (first, second, third)]
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.wait_for_function("document.querySelector('[data-agreement-rate]').innerText === '100%'")
    page.keyboard.press("a")
    page.wait_for_selector(f"#output-{ids[1]}.agreed")
    page.keyboard.press("n")
    page.keyboard.type("the wrong tool still earned the arguments part")
    page.keyboard.press("Escape")
    page.keyboard.press("d")
    page.wait_for_selector(f"#output-{ids[2]}.disagreed")
    assert rate(page) == "67%"

    # And one with the mouse.
    fourth = page.locator("#outputs > li.output").nth(3)
    fourth_id = fourth.get_attribute("data-output")
    fourth.get_by_role("button", name="Disagree").click()
    page.wait_for_function("document.querySelector('[data-agreement-rate]').innerText === '50%'")
    page.wait_for_selector(f"#output-{fourth_id}.disagreed.current")  # the swapped-in row stays the current one
    assert "2 agree, 2 disagree" in page.locator("#agreement").inner_text()
    shot(page, "rewards-profile-marked", full_page=False)
    marks = {mark.output_id: (mark.verdict, mark.note) for mark in Mark.objects.all()}
    assert marks[ids[0]] == marks[ids[1]] == ("agree", "")
    assert marks[ids[2]] == ("disagree", "the wrong tool still earned the arguments part")

    # Reloaded, the disagreements come first and the rate stays.
    page.reload()
    assert rate(page) == "50%"
    assert page.locator("#outputs > li.output").first.get_attribute("class").split() == ["output", "disagreed"]

    # Re-verify under a stricter policy and open the comparison.
    before = list(ProfiledOutput.objects.filter(run=run).order_by("position").values_list("output", "reward"))
    page.get_by_role("link", name="Re-verify these outputs").click()
    page.get_by_label("Policy").fill(json.dumps(STRICT_POLICY, indent=2))
    page.get_by_label("Note").fill("no calculators")
    page.get_by_role("button", name="Re-verify and compare").click()
    page.wait_for_url("**/compare/")
    child = ProfileRun.objects.get(parent=run)
    changed = int(page.locator("[data-changed]").inner_text())
    assert changed > 0 and page.locator("[data-changed-output]").count() == changed
    assert page.locator("[data-same-outputs]").inner_text() == "yes"
    assert page.get_by_text("newly broken: denied-tool").first.is_visible()
    shot(page, "rewards-comparison", full_page=False)
    after = list(child.outputs.order_by("position").values_list("output", "reward"))
    assert [output for output, _ in after] == [output for output, _ in before]
    assert sum(1 for (_, old), (_, new) in zip(before, after, strict=True) if old != new) == changed
    assert list(ProfiledOutput.objects.filter(run=run).order_by("position").values_list("output", "reward")) == before
