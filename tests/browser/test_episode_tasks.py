"""An episode task in a real Chromium: a reviewer converts a multi-turn tau-bench failure into an episode
that starts at an earlier user turn, and the task page lists what the replay will answer from."""

from __future__ import annotations

from flywheel.core.roles import Role
from flywheel.datasets.models import RegressionTask
from flywheel.ingest.models import StepKind, Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from tests.browser.markers import PAGE
from tests.browser.screenshots import shot
from tests.conftest import PASSWORD
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = PAGE


def test_a_reviewer_converts_a_multi_turn_failure_into_an_episode_task(
    page, live_server, make_user, sign_in, tau_bench_path
):
    options = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=options)
    trajectory = Trajectory.objects.get(external_id="22:0")
    start = trajectory.steps.get(kind=StepKind.USER, text__startswith="The reservation ID is").index
    sign_in(make_user(Role.REVIEWER), PASSWORD)

    page.goto(f"{live_server.url}/trajectories/{trajectory.id}/")
    page.get_by_role("link", name="Convert to task").click()
    page.get_by_label("Episode from here").check()
    page.get_by_role("button", name="Draft").click()
    page.wait_for_url("**mode=episode**")
    page.get_by_label("Start at the user turn").select_option(str(start))
    page.get_by_role("button", name="Draft").click()
    page.wait_for_url(f"**start={start}**")
    assert page.locator("#convert-form [data-episode-environment]").count() == 0  # the note sits above the form
    assert page.locator("[data-episode-environment]").inner_text() == "replay"
    assert page.locator(".recorded-calls tbody tr").count() == 4
    shot(page, "episode-task-convert")
    page.get_by_role("button", name="Save episode task").click()

    task = RegressionTask.objects.get()
    page.wait_for_url(f"**/tasks/{task.id}/")
    recorded = page.locator(".recorded-calls tbody tr td:nth-child(2)").all_inner_texts()
    assert recorded == ["get_reservation_details", "search_direct_flight", "calculate", "update_reservation_flights"]
    answers = page.locator(".replay-answers tbody tr")
    assert answers.count() == 4
    assert answers.nth(0).inner_text().endswith("answered from the recording")
    assert answers.nth(2).inner_text().endswith("no recorded result: the replay answers with an error")
    assert page.locator("[data-episode-environment]").inner_text() == "replay"
    shot(page, "episode-task-detail")
