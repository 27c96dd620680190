"""The whole flywheel in a real Chromium, one role after another, with every non-local request blocked.

A reviewer uploads production trajectories, triages a failure by keyboard, turns it into a
held-out task and freezes the held-out snapshot; a trainer runs a baseline evaluation, profiles
rewards, trains the live version further with GRPO and gates the new version; an approver reads
the gate, promotes, the agent's chat endpoint answers from the new version, the approver rolls
back and the history has it all. Then an admin opens every page of the URLconf, charts
included, and nothing outside the test server was asked for. Jobs run on a real worker with the
tiny model; the chat endpoint starts a real `python -m trainer serve`.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlparse

import pytest
from django.urls import get_resolver, reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.datasets.importers import read
from flywheel.datasets.models import RegressionTask, TaskSetSnapshot
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.ingest.models import Trajectory, Upload
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.registry import selectors as registry_selectors
from flywheel.registry import services as registry_services
from flywheel.registry import serving
from flywheel.registry.models import Deployment, GateResult, ModelVersion
from flywheel.rewards.models import ProfileRun
from flywheel.rewards.services import Scoring, reverify
from flywheel.training.models import Job
from flywheel.triage.models import BucketAssignment, Suggestion
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.services import queue_create
from tests.browser.charts import wait_for_charts
from tests.browser.jobs import JOB_SECONDS, launch_job, wait_for_job
from tests.browser.markers import JOURNEY
from tests.browser.screenshots import shot
from tests.conftest import PASSWORD
from tests.flywheel.registry.conftest import TINY_MODEL, TINY_TASKS, make_adapter
from tests.flywheel.test_permissions import _walk
from tests.flywheel.triage.conftest import built_in_buckets  # noqa: F401  (a shared fixture)

pytestmark = [*JOURNEY, pytest.mark.usefixtures("built_in_buckets")]
AGENT = "support-bot"
TINY_GRPO = {"max_steps": 2, "num_generations": 2, "max_completion_length": 16, "learning_rate": 1e-3,
             "eval_interval": 0, "checkpoint_interval": 0, "eval_max_new_tokens": 16, "max_truncated_share": 1.0,
             "device": "cpu"}  # fmt: skip
TINY_EVAL = {"verifier": "tool_call", "batch_size": 4, "max_new_tokens": 16, "device": "cpu"}
TINY_GATE = {"device": "cpu", "batch_size": 4, "max_new_tokens": 16}
DOWNLOADS = {"registry:version_download", "datasets:snapshot_export", "datasets:pair_export",
             "datasets:correction_export"}  # attachments: fetched, not shown
EXPECTED_CALL = {"name": "calculate_triangle_area", "arguments": {"base": [12], "height": [7]}}  # accepted values


def production_trajectories() -> str:
    """Three conversations of the support bot: two that went well and one that called the wrong tool."""
    question = "My garden bed is a triangle, 12 m along the base and 7 m high. How much soil cover do I need?"
    triangle = json.loads(TINY_TASKS.read_text().splitlines()[0])["tools"][0]
    circle = {"type": "function", "function": {"name": "calculate_circle_area", "description": "Area of a circle.",
              "parameters": {"type": "object", "properties": {"radius": {"type": "number"}}, "required": ["radius"]}}}

    def record(number: int, outcome: str, tool: str) -> dict:
        answer = "42" if outcome == "success" else "153.9"
        return {"id": f"conv-{number}", "outcome": outcome, "tools": [triangle, circle], "steps": [
            {"kind": "user", "text": question},
            {"kind": "tool_call", "tool": tool, "arguments": {"base": 12, "height": 7}, "call_id": "c1"},
            {"kind": "tool_result", "tool": tool, "call_id": "c1", "text": answer},
            {"kind": "assistant", "text": f"You need {answer} m² of cover."},
        ]}  # fmt: skip

    records = [record(1, "success", "calculate_triangle_area"), record(2, "failure", "calculate_circle_area"),
               record(3, "success", "calculate_triangle_area")]  # fmt: skip
    return "".join(json.dumps(r) + "\n" for r in records)


def ticked(page) -> list[str]:
    return page.eval_on_selector_all(
        "[data-bucket] input[type=checkbox]:checked", "(boxes) => boxes.map((box) => box.value).sort()"
    )


def wait_until(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


class Offline:
    """Blocks every request that does not go to the test server, and remembers them and the page errors."""

    def __init__(self, context, live_server_url: str) -> None:
        self.host = urlparse(live_server_url).netloc
        self.blocked: list[str] = []
        self.errors: list[str] = []
        context.route("**/*", self._route)

    def _route(self, route) -> None:
        if urlparse(route.request.url).netloc == self.host:
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort("blockedbyclient")

    def watch(self, page) -> None:
        page.on("pageerror", lambda error: self.errors.append(f"{page.url}: {error}"))


def sign_in_as(page, live_server, user) -> None:
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/")


@pytest.fixture
def production(settings, tmp_path, make_user):
    """What production holds before the session: the agent, its live v1, its train tasks."""
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    settings.SERVE_URL, settings.SERVE_DEVICE, settings.SERVE_MAX_NEW_TOKENS = "", "cpu", 8
    agent = Agent.objects.create(name=AGENT, description="the shop's support agent")
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="train", agent=agent, source_ref="tiny")
    train = snapshot_create(actor=None, name="support-bot train", split="train", agent=agent)
    first = registry_services.version_register(
        actor=None, agent=agent, adapter_dir=make_adapter(tmp_path / "v1", seed=1), base_model=str(TINY_MODEL)
    )
    registry_services.version_promote(actor=make_user(Role.APPROVER), version=first, reason="first ship")
    yield train
    serving.MANAGED.stop()


def test_the_flywheel_from_a_production_failure_to_a_promoted_and_rolled_back_version_offline(
    browser, live_server, make_user, celery_worker_process, production, settings, tmp_path
):
    celery_worker_process("default,gpu", env={"REGISTRY_DIR": settings.REGISTRY_DIR})
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    offline = Offline(context, live_server.url)
    page = context.new_page()
    page.set_default_timeout(30_000)
    offline.watch(page)
    url = live_server.url

    # Reviewer: upload, triage by keyboard, convert to a held-out task, freeze the held-out snapshot.
    reviewer = make_user(Role.REVIEWER)
    sign_in_as(page, live_server, reviewer)
    upload_file = tmp_path / "production.jsonl"
    upload_file.write_text(production_trajectories())
    page.goto(f"{url}/uploads/new/")
    page.locator("input[type=file]").set_input_files(str(upload_file))
    page.locator("#id_agent").fill(AGENT)
    page.get_by_role("button", name="Upload").click()
    page.wait_for_function(
        "document.querySelector('[role=progressbar]')?.getAttribute('aria-valuenow') === '100'", timeout=120_000
    )
    assert page.locator("[data-count=stored]").inner_text() == "3"
    shot(page, "01-upload")

    failure = Trajectory.objects.get(external_id="conv-2")
    page.goto(f"{url}/trajectories/?outcome=failure&agent={AGENT}")
    page.get_by_role("link", name="conv-2", exact=True).click()
    page.wait_for_url(f"**/trajectories/{failure.id}/")
    wait_until(lambda: Suggestion.objects.filter(trajectory=failure).exists())  # the worker's suggester ran
    page.goto(f"{url}/triage/review/{failure.id}/")
    page.wait_for_load_state()  # triage.js (deferred) has bound its keys
    assert ticked(page) == ["format_error", "hallucinated_api"]  # suggested: the arguments fit no circle
    for key in ("1", "6", "2"):  # untick both suggestions, tick Wrong tool
        page.keyboard.press(key)
    assert ticked(page) == ["wrong_tool"]
    page.keyboard.press("Enter")
    page.locator("#review p.saved").wait_for()
    assert list(BucketAssignment.objects.filter(trajectory=failure).values_list("bucket__slug", flat=True)) == [
        "wrong_tool"
    ]
    shot(page, "02-triage")

    page.locator("a.convert-to-task").click()
    page.wait_for_url(f"**/tasks/new/from-trajectory/{failure.id}/**")
    page.locator("#id_split").select_option("heldout")
    page.locator("#id_expected_calls").fill(json.dumps([EXPECTED_CALL]))
    page.get_by_role("button", name="Save task").click()
    page.wait_for_url("**/tasks/*/")
    task = RegressionTask.objects.get(source_trajectory=failure)
    assert task.split == "heldout" and task.content["expected_calls"] == [EXPECTED_CALL]
    assert "calculate_circle_area" in page.content()  # the wrong call stays beside the task

    page.goto(f"{url}/snapshots/")
    form = page.locator("#snapshot-form")
    form.get_by_label("Name", exact=True).fill("support-bot held-out")
    form.get_by_label("Split", exact=True).select_option("heldout")
    form.get_by_label("Agent", exact=True).select_option(label=AGENT)
    form.get_by_role("button", name="Freeze the snapshot").click()
    page.wait_for_url("**/snapshots/*/")
    heldout = TaskSetSnapshot.objects.get(name="support-bot held-out")
    assert heldout.task_count == 1 and heldout.items.get().task == task

    # Trainer: baseline evaluation, reward profile, GRPO from the live version, the gate.
    sign_in_as(page, live_server, make_user(Role.TRAINER))
    launch_job(page, url, kind="eval", snapshot_id=heldout.id, base_model=str(TINY_MODEL), hyperparameters=TINY_EVAL)
    wait_for_job(page)
    baseline_job = Job.objects.get(kind="eval")
    page.goto(f"{url}/jobs/{baseline_job.id}/evaluation/")
    recommendation = page.get_by_role("region", name="Recommendation")
    assert "Recommended next: a prompt change" in recommendation.inner_text()  # malformed or wrong-tool answers
    assert recommendation.locator("li[data-option=sft]").is_visible()  # and the model is never right
    shot(page, "03-baseline-evaluation")

    page.goto(f"{url}/rewards/new/")
    page.locator("#id_snapshot").select_option(str(heldout.id))
    page.get_by_label("Assistant steps of ingested trajectories").check()
    page.locator("#id_sample_size").fill("10")
    page.get_by_role("button", name="Sample and score").click()
    page.wait_for_url("**/rewards/*/")
    run = ProfileRun.objects.get()
    profiled = run.outputs.get()  # the one agent answer at the task's step: the wrong tool
    assert not profiled.passed and profiled.reward < 1
    assert "calculate_circle_area" in page.locator(f"#output-{profiled.id} [data-output-text]").inner_text()

    page.goto(f"{url}/models/{AGENT}/v1/")
    page.get_by_role("link", name="Train further from this version").click()
    page.wait_for_url("**/jobs/new/?**")
    assert page.get_by_label("Kind", exact=True).input_value() == "grpo"
    first = ModelVersion.objects.get(agent__name=AGENT, number=1)
    assert page.get_by_label("Parent adapter", exact=True).input_value() == str(
        registry_selectors.adapter_location(version=first)
    )
    page.get_by_label("Snapshot", exact=True).select_option(str(production.id))
    page.get_by_label("Held-out snapshot", exact=True).select_option(str(heldout.id))
    page.get_by_label("Hyperparameters", exact=True).fill(json.dumps(TINY_GRPO))
    page.get_by_role("button", name="Queue on the gpu queue").click()
    page.wait_for_url("**/jobs/*/")
    wait_for_job(page)
    shot(page, "04-grpo-job")
    second = ModelVersion.objects.get(agent__name=AGENT, number=2)
    assert second.parent == first
    assert second.training_job.kind == "grpo"

    page.goto(f"{url}/models/{AGENT}/v2/")
    page.locator("textarea[name=options]").fill(json.dumps(TINY_GATE))
    page.get_by_role("button", name="Queue the gate").click()
    page.wait_for_url("**/jobs/*/")
    wait_for_job(page)
    gate = GateResult.objects.get(candidate=second)
    assert gate.status in ("passed", "failed") and gate.baseline.number == 1

    # Approver: read the gate, promote, ask the chat endpoint, roll back, read the history.
    approver = make_user(Role.APPROVER)
    sign_in_as(page, live_server, approver)
    page.goto(f"{url}/models/{AGENT}/v2/")
    page.get_by_role("link", name="baseline vs tuned").click()
    page.wait_for_url(f"**/gates/{gate.id}/")
    assert page.get_by_role("heading", name="support-bot:v1 vs support-bot:v2").is_visible()
    shot(page, "05-gate")
    page.go_back()
    page.get_by_label("Override reason").fill("the end-to-end test ships whatever the tiny model's gate says")
    page.get_by_role("button", name="Promote support-bot:v2").click()
    page.get_by_text("support-bot:v2 is live.").wait_for()

    page.goto(f"{url}/account/tokens/")
    page.get_by_label("Name").fill("support-bot in production")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text()
    answer = page.request.post(
        f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {token}"}, timeout=JOB_SECONDS,
        data={"model": AGENT, "messages": [{"role": "user", "content": "What is the area of my triangle?"}],
              "max_tokens": 8},
    )  # fmt: skip
    assert answer.status == 200, answer.text()
    assert answer.json()["model"] == "support-bot:v2"
    assert answer.json()["flywheel"]["adapter_sha256"] == second.adapter_sha256

    page.goto(f"{url}/models/{AGENT}/")
    page.get_by_label("Reason").fill("production disagrees: more escalations since v2")
    page.get_by_role("button", name="Roll back from support-bot:v2").click()
    page.get_by_text("Rolled back to support-bot:v1.").wait_for()
    history = [row.inner_text() for row in page.locator("table.history tbody tr").all()]
    assert len(history) == 3 and "Roll back" in history[0] and "production disagrees" in history[0]
    assert "Promote" in history[1] and "support-bot:v2" in history[1] and "Promote" in history[2]
    assert registry_selectors.live_version(agent=second.agent).number == 1
    assert Deployment.objects.filter(actor_name=approver.username).count() == 2
    shot(page, "06-history")

    # Admin: every page of the URLconf renders offline, charts drawn.
    admin = make_user(Role.ADMIN)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    queue = queue_create(actor=admin, name="support-bot failures",
                         filters=TriageFilters(base=TrajectoryFilters(outcome="failure", agent=AGENT)))  # fmt: skip
    reverified = reverify(actor=admin, run=run, scoring=Scoring(verifier="binary", policy=run.policy))
    sign_in_as(page, live_server, admin)
    grpo_job = second.training_job
    objects = {
        "trajectory_id": failure.id, "upload_id": Upload.objects.get().id, "task_id": task.id,
        "snapshot_id": heldout.id, "format_name": "trl", "job_id": grpo_job.id, "gate_id": gate.id,
        "run_id": run.id, "output_id": run.outputs.get().id, "queue_id": queue.id, "agent_name": AGENT,
        "name": AGENT, "number": 2, "token_id": None, "external_id": failure.external_id,
        "index": None, "sample_id": None,  # this journey is single-turn: no episode pages (test_eval_episodes.py)
        "rule_id": None, "alert_id": None, "replay_id": None,  # no scoring rule, alert or replay in this journey
        "batch_id": None,  # no synthetic batch either (tests/flywheel/datasets/test_synthetic.py renders them)
        "baseline_job_id": baseline_job.id, "candidate_job_id": baseline_job.id,  # an evaluation paired with itself
    }  # fmt: skip
    rendered, post_only = [], []
    for name, pattern in _walk(get_resolver().url_patterns):  # every pattern outside the admin
        kwargs = {key: objects[key] for key in pattern.pattern.converters}
        if None in kwargs.values() or getattr(pattern.callback, "is_api", False):
            continue  # a POST-only action on a row we keep, an episode, or JSON for machines
        if name in ("training:eval_detail", "training:prompt_change"):
            kwargs["job_id"] = baseline_job.id
        if name == "rewards:run_compare":
            kwargs["run_id"] = reverified.id
        address = f"{url}{reverse(name, kwargs=kwargs)}"
        status = page.request.get(address).status
        if status == 405:
            post_only.append(name)
            continue
        if name in DOWNLOADS:
            assert status == 200, name
            rendered.append(name)
            continue
        status = page.goto(address).status
        assert status == 200, f"{name}: {status}"
        # Every chart the page has is drawn (the vendored plotly loaded); the job page's come from a fetch.
        wait_for_charts(page, minimum=1 if name == "training:job_detail" else 0)
        rendered.append(name)
    page.goto(f"{url}/admin/")
    assert page.get_by_text("Site administration").is_visible()

    assert len(rendered) >= 46 and "training:job_detail" in rendered and "registry:gate_detail" in rendered
    assert sorted(post_only) == [  # actions, not pages: each answers GET with 405
        "datasets:pair_snapshot_new", "datasets:synthetic_new", "demo:loop_start", "logout", "registry:agent_rollback",
        "registry:gate_launch", "registry:gate_policy_update", "registry:replay_launch", "registry:version_promote",
        "rewards:judge_buckets_launch", "rewards:output_mark", "rewards:run_judge_launch", "training:job_cancel",
        "triage:bulk", "triage:queue_item_remove", "triage:queue_next", "triage:review_interventions",
        "triage:review_save",
    ]  # fmt: skip
    assert offline.blocked == [] and offline.errors == []
    context.close()
