"""The agent's LLM judge in a real Chromium, with a real worker and the tiny model as the judge.

A trainer asks the judge for bucket suggestions from the triage list; the worker runs the three
`judge` jobs (wrong tool, bad planning, retrieval failure); the judge's bucket judgings page shows
each one done, with its items counted and what it suggested. Then a reward profile with three
marked outputs is judged from its judge agreement page, which shows the figures and says there
are not enough labels. The tiny model's replies are noise: the checks are on what the pages must
show whatever it says (jobs finished, counts equal to the jobs' results and the stored rows), never
on the judge's opinions.
"""

from __future__ import annotations

import pytest

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.rewards.models import AgentJudge, BucketJudging, JudgeRun
from flywheel.training.models import Job
from flywheel.triage.models import Suggestion
from flywheel.triage.suggestions import LLM_JUDGE
from tests.browser.jobs import wait_for_job
from tests.browser.markers import JOURNEY
from tests.browser.screenshots import shot
from tests.conftest import PASSWORD
from tests.flywheel.registry.conftest import TINY_MODEL
from tests.flywheel.rewards.conftest import judged_agent as judged_agent  # noqa: F401  (shared fixtures)
from tests.flywheel.rewards.conftest import judged_run as judged_run  # noqa: F401
from tests.flywheel.triage.conftest import built_in_buckets, call, result, shop_record, store, user  # noqa: F401

pytestmark = JOURNEY
BUCKETS = ["wrong_tool", "bad_planning", "retrieval_failure"]
MARKED = 3


@pytest.fixture
def shop_failures(store, built_in_buckets) -> list[str]:  # noqa: F811
    """Three failed shop trajectories awaiting review, one success; the shop agent's judge is the tiny model."""
    ask = user("Refund order 7, please.")
    stored = store(
        shop_record("refund-no-lookup", [ask, call("refund_order", {"order_id": "7", "amount": 500}, "c1"),
                                         result("refund_order", "Error: more than the total", error=True,
                                                call_id="c1")]),
        shop_record("wrong-order", [ask, call("lookup_order", {"order_id": "8"}, "c1"),
                                    result("lookup_order", "order 8: 12 EUR", call_id="c1")]),
        shop_record("no-call", [ask, {"kind": "assistant", "text": "Done, refunded."}]),
        shop_record("fine", [ask, {"kind": "assistant", "text": "Refunded."}], outcome="success"),
    )  # fmt: skip
    AgentJudge.objects.create(agent=Agent.objects.get(name="shop"), base_model=str(TINY_MODEL))
    return sorted(name for name, trajectory in stored.items() if trajectory.outcome == "failure")


def cell(row, figure: str) -> str:
    return row.locator(f"[data-{figure}]").inner_text().strip()


def test_a_trainer_has_the_judge_suggest_buckets_and_reads_its_judgings(
    page, live_server, make_user, sign_in, celery_worker_process, shop_failures
):
    celery_worker_process("default,gpu")
    url = live_server.url
    sign_in(make_user(Role.TRAINER), PASSWORD)

    page.goto(f"{url}/triage/trajectories/?agent=shop")
    page.get_by_role("button", name="Suggest wrong tool / bad planning / retrieval failure with the judge").click()
    page.wait_for_url("**/triage/trajectories/?agent=shop")
    assert "The judge will look at 3 failed trajectories of shop in 3 jobs" in page.locator("ul.messages").inner_text()
    page.get_by_role("link", name="The judge's bucket judgings of shop").click()
    page.wait_for_url("**/rewards/agents/shop/judge-buckets/")
    rows = page.locator("tr[data-judging]")
    assert rows.count() == 3
    # Newest first: the launch made them in BUCKETS' order.
    assert [rows.nth(n).get_attribute("data-bucket") for n in range(3)] == BUCKETS[::-1]
    assert all(cell(rows.nth(n), "asked") == "3" for n in range(3))

    # Each job's page (linked from its row) polls until the worker has run the tiny judge.
    job_links = [rows.nth(n).locator("a[href*='/jobs/']").get_attribute("href") for n in range(3)]
    for link in job_links:
        page.goto(f"{url}{link}")
        wait_for_job(page)

    page.goto(f"{url}/rewards/agents/shop/judge-buckets/")
    for judging in BucketJudging.objects.select_related("job", "bucket"):
        row = page.locator(f"tr[data-judging='{judging.pk}']")
        metrics = judging.job.result["metrics"]
        assert row.locator("[data-job-state]").get_attribute("data-job-state") == "succeeded"
        assert cell(row, "judged") == str(metrics["items"]) == "3"
        assert cell(row, "unreadable") == str(metrics["unreadable"])
        stored = Suggestion.objects.filter(rule=LLM_JUDGE, bucket=judging.bucket).count()
        assert cell(row, "suggested") == str(judging.suggested) == str(stored)
        assert judging.suggested <= metrics["items"] - metrics["unreadable"]  # an unreadable reply suggests nothing
        made = page.locator(f"[data-suggestions='{judging.pk}']")
        if judging.suggested:
            made.locator("summary").click()
            links = made.locator("a[href*='/triage/review/']")
            assert links.count() == judging.suggested
            assert {links.nth(n).inner_text() for n in range(links.count())} <= set(shop_failures)
        else:
            assert made.count() == 0
    shot(page, "judge-bucket-judgings")


def test_a_trainer_judges_a_marked_profile_and_reads_the_agreement(
    page, live_server, make_user, sign_in, celery_worker_process, judged_run
):
    celery_worker_process("default,gpu")
    AgentJudge.objects.create(agent=judged_run.snapshot.agent, base_model=str(TINY_MODEL))
    url = live_server.url
    sign_in(make_user(Role.TRAINER), PASSWORD)

    page.goto(f"{url}/rewards/{judged_run.pk}/")
    outputs = page.locator("#outputs > li.output")
    for output_id in [outputs.nth(n).get_attribute("data-output") for n in range(MARKED)]:
        page.locator(f"#output-{output_id} button.agree").click()
        page.wait_for_selector(f"#output-{output_id}.agreed")
    page.get_by_role("link", name="LLM judge agreement").click()
    page.wait_for_url(f"**/rewards/{judged_run.pk}/judge/")
    assert page.locator("[data-labelled]").inner_text() == str(MARKED)
    page.get_by_role("button", name=f"Judge the {MARKED} labelled outputs").click()
    page.wait_for_url(f"**/rewards/{judged_run.pk}/judge/")
    page.get_by_role("link", name=str(JudgeRun.objects.get().job)).click()
    job = wait_for_job(page)

    page.goto(f"{url}/rewards/{judged_run.pk}/judge/")
    metrics = Job.objects.get(pk=job.pk).result["metrics"]
    assert metrics["items"] == MARKED
    warning = page.locator("[data-not-enough]").inner_text()
    assert f"Not enough labels: {MARKED} labelled outputs judged, 50 are needed" in warning
    # Each mark agreed, so each label is the verifier's pass/fail; an unreadable reply agrees with none.
    judgements = JudgeRun.objects.get().judgements.select_related("output")
    agreed = sum(row.passed is not None and row.passed == row.output.passed for row in judgements)
    figure = page.locator(".tile", has=page.locator("[data-judge-agreement]")).inner_text()
    assert f"agreement, {agreed}/{MARKED}" in figure
    unreadable = page.locator(".tile", has_text="unreadable replies").locator(".figure").inner_text()
    assert unreadable == str(metrics["unreadable"]) == str(sum(row.score is None for row in judgements))
    assert page.locator("[data-approval]").get_attribute("data-approval") == "refused"
    page.get_by_role("link", name=f"the judge's bucket judgings of {judged_run.snapshot.agent.name}").click()
    page.wait_for_url(f"**/rewards/agents/{judged_run.snapshot.agent.name}/judge-buckets/")
    assert page.get_by_text("has not been asked about").is_visible()
    shot(page, "judge-empty-bucket-judgings")
