"""Screenshots of the main pages for the README's tour, taken from a running demo with Playwright and Chromium.

Run after `make demo` and `manage.py flywheel_demo`, with the same FLYWHEEL_VAR_DIR as the demo
(the pages' ids are read from its database, the logins from its demo-logins.json):

    .venv/bin/python scripts/screenshots.py [--url http://127.0.0.1:8000] [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")
CHROMIUM = os.environ.get("FLYWHEEL_CHROMIUM", "/usr/bin/chromium")


def tour() -> list[tuple[str, str, str]]:
    """(file name, path, role) of each page to shoot, the ids read from the demo's database."""
    from flywheel.ingest.models import Trajectory
    from flywheel.registry.models import GateResult
    from flywheel.training.models import Job, JobKind, JobState

    failure = Trajectory.objects.filter(agent__name="airline", outcome="failure").order_by("external_id").first()
    jobs = Job.objects.filter(state=JobState.SUCCEEDED).order_by("-created_at")
    grpo, baseline = jobs.filter(kind=JobKind.GRPO).first(), jobs.filter(kind=JobKind.EVAL).first()
    gate = GateResult.objects.order_by("-created_at").first()
    pages = [("home", "/", "admin"), ("trajectories", "/trajectories/?outcome=failure&agent=airline", "viewer"),
             ("tasks", "/tasks/?agent=function-caller", "viewer"), ("jobs", "/jobs/", "trainer")]  # fmt: skip
    if failure is not None:
        pages += [("trace", f"/trajectories/{failure.id}/", "viewer"),
                  ("triage", f"/triage/review/{failure.id}/", "reviewer")]  # fmt: skip
    if baseline is not None:
        pages.append(("baseline-evaluation", f"/jobs/{baseline.id}/evaluation/", "trainer"))
    if grpo is not None:
        pages.append(("grpo-job", f"/jobs/{grpo.id}/", "trainer"))
    if gate is not None:
        pages += [("gate", f"/gates/{gate.id}/", "approver"),
                  ("versions", f"/models/{gate.candidate.agent.name}/", "approver")]  # fmt: skip
    pages.append(("dashboards", "/dashboards/", "viewer"))
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "screenshots")
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from playwright.sync_api import sync_playwright

    logins = json.loads(Path(settings.DEMO_LOGINS_FILE).read_text())
    pages = tour()  # before Playwright's event loop starts: the ORM is synchronous
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        for name, path, role in pages:
            context = browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
            page = context.new_page()
            page.goto(f"{args.url}/accounts/login/")
            page.get_by_label("Username").fill(f"demo-{role}")
            page.get_by_label("Password").fill(logins[role])
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{args.url}/")
            page.goto(f"{args.url}{path}")
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1500)  # plotly's first draw and the job page's first chart poll
            page.screenshot(path=str(args.out / f"{name}.png"))
            print(f"{name}: {path} as {role}")
            context.close()
        browser.close()


if __name__ == "__main__":
    main()
