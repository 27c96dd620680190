"""Triage in a real Chromium: a reviewer works a queue of real tau-bench failures with the keyboard only."""

from __future__ import annotations

import io
import json
import time

import pytest

from flywheel.core.roles import Role
from flywheel.dashboards.services import summaries_recount
from flywheel.ingest.models import Trajectory
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.triage import selectors, services
from flywheel.triage.models import BucketAssignment, Review, ReviewState
from flywheel.triage.selectors import TriageFilters
from tests.browser.charts import chart_data
from tests.browser.markers import PAGE
from tests.browser.screenshots import shot
from tests.conftest import PASSWORD
from tests.flywheel.triage.conftest import TAU, built_in_buckets  # noqa: F401  (a shared fixture)

pytestmark = [*PAGE, pytest.mark.usefixtures("built_in_buckets")]


@pytest.fixture
def airline_queue(tau_bench_path, make_user):
    with tau_bench_path.open("rb") as stream:
        stream_ingest(stream=stream, options=TAU)
    services.suggestions_compute(trajectory_ids=list(Trajectory.objects.values_list("pk", flat=True)))
    filters = TriageFilters(base=TrajectoryFilters(outcome="failure", agent="airline"))
    return services.queue_create(actor=make_user(Role.ADMIN), name="airline failures", filters=filters)


def shown_trajectory(page) -> str:
    return page.locator("#review").get_attribute("data-trajectory")


def wait_for_trajectory(page, trajectory_id) -> None:
    page.wait_for_function(f"document.getElementById('review')?.dataset.trajectory === '{trajectory_id}'")


def test_a_reviewer_triages_three_trajectories_with_the_keyboard(page, live_server, make_user, sign_in, airline_queue):
    reviewer = make_user(Role.REVIEWER)
    expected = [
        review.trajectory_id for review in selectors.queue_candidates_first(airline_queue, viewer=reviewer, limit=4)
    ]
    sign_in(reviewer, PASSWORD)
    page.goto(f"{live_server.url}/triage/queues/{airline_queue.pk}/")
    page.get_by_role("button", name="Start reviewing").focus()
    page.keyboard.press("Enter")
    wait_for_trajectory(page, expected[0])
    page.wait_for_load_state()  # triage.js (deferred) has bound its keys
    assert page.get_by_text("Save & next").is_visible() and page.get_by_text("toggle a bucket").first.is_visible()
    timings = []

    # 1: move to a step, mark it, put "Bad planning" (key 3) there, save.
    started = time.monotonic()
    for _ in range(4):
        page.keyboard.press("j")
    marked_step = int(page.locator(".trace > li.step.current").get_attribute("id").removeprefix("step-"))
    page.keyboard.press("m")
    page.keyboard.press("3")
    assert page.locator(f"#step-{marked_step} .bucket-chip.on-step").inner_text() == "Bad planning"
    shot(page, "triage-review-keyboard", full_page=False)
    page.keyboard.press("Enter")
    wait_for_trajectory(page, expected[1])
    timings.append(time.monotonic() - started)

    # 2: a wrong key undone, then "Retrieval failure" (key 5) for the whole trajectory.
    started = time.monotonic()
    page.keyboard.press("2")
    page.keyboard.press("u")
    page.keyboard.press("5")
    page.keyboard.press("Enter")
    wait_for_trajectory(page, expected[2])
    timings.append(time.monotonic() - started)
    assert page.url.endswith(f"/triage/review/{expected[2]}/?queue={airline_queue.pk}&previous={expected[1]}")

    # 3: the key list opens and closes with "?", then "Hallucinated API" (key 6) and save.
    started = time.monotonic()
    page.keyboard.press("?")
    assert page.locator("#shortcut-help").is_visible()
    # "?" again closes it and hands focus back to the page at once, so a quick Enter saves (read in
    # the same task as the key, before the browser's own focus fixup could move it).
    focused_after_close = page.evaluate(
        "document.activeElement.dispatchEvent(new KeyboardEvent('keydown', {key: '?', bubbles: true})),"
        " document.activeElement.tagName"
    )
    assert focused_after_close == "BODY"
    assert not page.locator("#shortcut-help").is_visible()
    page.keyboard.press("6")
    page.keyboard.press("Enter")
    wait_for_trajectory(page, expected[3])
    timings.append(time.monotonic() - started)

    stored = {
        trajectory_id: sorted(
            BucketAssignment.objects.filter(trajectory_id=trajectory_id).values_list("bucket__slug", "step_index")
        )
        for trajectory_id in expected[:3]
    }
    assert stored == {
        expected[0]: [("bad_planning", marked_step)],
        expected[1]: [("retrieval_failure", None)],
        expected[2]: [("hallucinated_api", None)],
    }
    reviews = Review.objects.filter(trajectory_id__in=expected[:3])
    assert {(r.state, r.reviewer_id) for r in reviews} == {(ReviewState.REVIEWED, reviewer.pk)}
    assert "3 / 116" in page.locator(".queue-progress").inner_text()
    assert max(timings) < 5, timings  # keys to the next item on screen, on a shared 2-core machine

    summaries_recount()  # the home page's chart is as of beat's last recount, unlike the reviewer's own progress
    page.goto(f"{live_server.url}/")
    bars = chart_data(page)[0]["x"]
    assert bars[:7] == [0, 0, 1, 0, 1, 1, 0]  # bucketed per bucket, in position order
    shot(page, "triage-home-chart", full_page=False)


def test_undo_with_nothing_left_to_undo_reopens_the_trajectory_just_saved(
    page, live_server, make_user, sign_in, airline_queue
):
    reviewer = make_user(Role.REVIEWER)
    first, second = [
        review.trajectory_id for review in selectors.queue_candidates_first(airline_queue, viewer=reviewer, limit=2)
    ]
    sign_in(reviewer, PASSWORD)
    page.goto(f"{live_server.url}/triage/queues/{airline_queue.pk}/")
    page.get_by_role("button", name="Start reviewing").focus()
    page.keyboard.press("Enter")
    wait_for_trajectory(page, first)
    page.wait_for_load_state()
    page.keyboard.press("4")
    page.keyboard.press("Enter")
    wait_for_trajectory(page, second)
    page.keyboard.press("u")
    wait_for_trajectory(page, first)
    assert "on" in page.locator("label[data-bucket=unsafe_action]").get_attribute("class").split()
    page.keyboard.press("4")
    page.keyboard.press("Enter")
    wait_for_trajectory(page, second)  # the claim on the second was kept for this reviewer
    assert not BucketAssignment.objects.filter(trajectory_id=first).exists()


def test_a_script_inside_a_trajectory_renders_as_text(page, live_server, make_user, sign_in):
    script = "<script>window.pwned = 1</script>"
    record = {
        "id": "hostile",
        "agent": "shop",
        "outcome": "failure",
        "steps": [
            {"kind": "user", "text": script},
            {"kind": "tool_call", "tool": "lookup<img src=x onerror='window.pwned=2'>", "arguments": {"q": script}},
            {"kind": "tool_result", "tool": "lookup", "text": "Error: " + script, "error": True},
        ],
    }
    stream_ingest(stream=io.BytesIO(json.dumps(record).encode()), options=IngestOptions(format="native"))
    trajectory = Trajectory.objects.get(external_id="hostile")
    services.suggestions_compute(trajectory_ids=[trajectory.pk])
    sign_in(make_user(Role.REVIEWER), PASSWORD)
    page.goto(f"{live_server.url}/triage/review/{trajectory.pk}/")
    assert page.locator("#step-0 pre.text").inner_text() == script
    assert script in page.locator("ul.suggestions").inner_text()
    assert page.evaluate("window.pwned") is None
    page.goto(f"{live_server.url}/triage/trajectories/?q=pwned")
    assert page.evaluate("window.pwned") is None
    assert page.get_by_role("link", name="hostile").is_visible()
