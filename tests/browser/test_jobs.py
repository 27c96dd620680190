from __future__ import annotations

from flywheel.core.roles import Role
from tests.browser.charts import wait_for_charts
from tests.browser.markers import PAGE_WITH_WORKER
from tests.conftest import PASSWORD
from tests.flywheel.training.conftest import scripted_env
from tests.flywheel.training.conftest import tiny_train_snapshot as tiny_train_snapshot  # noqa: F401  (shared)

pytestmark = PAGE_WITH_WORKER


def test_the_chart_of_a_running_job_gains_points(
    page, live_server, make_user, sign_in, celery_worker_process, tiny_train_snapshot
):
    celery_worker_process("gpu", env=scripted_env())
    sign_in(make_user(Role.TRAINER), PASSWORD)
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Kind", exact=True).select_option("grpo")
    page.get_by_label("Snapshot", exact=True).select_option(str(tiny_train_snapshot.id))
    page.get_by_label("Base model", exact=True).fill("scripted")
    page.get_by_label("Hyperparameters", exact=True).fill('{"max_steps": 40}')
    page.get_by_role("button", name="Queue on the gpu queue").click()
    page.wait_for_url("**/jobs/*/")
    # The charts' container carries the total number of points the last poll of chart.json drew.
    charts = page.locator("#job-charts")
    page.wait_for_function("Number(document.getElementById('job-charts').dataset.points || 0) >= 3", timeout=60_000)
    first = int(charts.get_attribute("data-points"))
    page.wait_for_function(f"Number(document.getElementById('job-charts').dataset.points) > {first}", timeout=30_000)
    assert wait_for_charts(page) >= 1  # plotly drew it
    assert page.locator("[data-state]").first.inner_text() in ("Running", "Succeeded")
