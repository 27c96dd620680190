from __future__ import annotations

import json

from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from tests.browser.markers import PAGE_WITH_WORKER
from tests.conftest import PASSWORD
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = PAGE_WITH_WORKER


def test_an_upload_shows_its_progress_and_rejected_lines(
    page, live_server, make_user, sign_in, celery_worker_process, tmp_path
):
    lines = [json.dumps({"id": str(n), "steps": [{"kind": "user", "text": f"hi {n}"}]}) for n in range(40)]
    lines[5], lines[17] = "this is not json", '{"steps": []}'
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    celery_worker_process("default")
    sign_in(make_user(Role.REVIEWER), PASSWORD)
    page.goto(f"{live_server.url}/uploads/new/")
    page.locator("input[type=file]").set_input_files(str(path))
    page.locator("#id_agent").fill("support-bot")
    page.get_by_role("button", name="Upload").click()
    progress = page.get_by_role("progressbar", name="Progress")
    progress.wait_for()
    page.wait_for_function(
        "document.querySelector('[role=progressbar]').getAttribute('aria-valuenow') === '100'", timeout=90_000
    )
    assert page.locator("[data-count=stored]").inner_text() == "38"
    rejected = page.locator("table.rejected tbody tr")
    assert rejected.count() == 2
    assert rejected.nth(0).inner_text().startswith("6")
    assert "not valid JSON" in rejected.nth(0).inner_text()
    assert "non-empty 'steps'" in rejected.nth(1).inner_text()


def test_the_trace_viewer_shows_a_tau_bench_conversation(page, live_server, make_user, sign_in, tau_bench_path):
    with tau_bench_path.open("rb") as stream:
        stream_ingest(
            stream=stream,
            options=IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline"),
        )
    trajectory = Trajectory.objects.get(external_id="0:0")
    sign_in(make_user(Role.VIEWER), PASSWORD)
    page.goto(f"{live_server.url}/trajectories/?outcome=failure&agent=airline&q=mia_li_3668")
    page.get_by_role("link", name="0:0", exact=True).click()
    page.wait_for_url(f"**/trajectories/{trajectory.id}/")
    first_call = page.locator(".step.kind-tool_call").first
    assert "get_user_details" in first_call.inner_text()
    assert '"user_id": "mia_li_3668"' in first_call.locator("pre").inner_text()
    assert page.locator(".step.kind-tool_result").count() == trajectory.steps.filter(kind="tool_result").count()
    assert not page.get_by_text("Airline Agent Policy").first.is_visible()  # the long system prompt starts folded
