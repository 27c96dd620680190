"""From reviewers' corrections to a gated DPO version, in a real Chromium with a real worker and the tiny model.

A reviewer corrects the failing call of two trajectories on their review pages; the corrections
become preference pairs, which the reviewer freezes into a pairs snapshot; a trainer launches a
dpo job on that snapshot from the launch form; the worker trains it and the registry registers its
adapter as a version; the trainer gates the version on a held-out snapshot, and the version's
page shows the gate's decision. Only what the browser cannot do (the ingested trajectories, the
held-out tasks) is made through services first.
"""

from __future__ import annotations

import json

import pytest

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.datasets.importers import read
from flywheel.datasets.models import PreferencePair, SnapshotKind, TaskSetSnapshot
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.registry.models import GateResult, GateStatus, ModelVersion
from flywheel.triage.models import Correction
from tests.browser.jobs import launch_job, wait_for_job
from tests.browser.markers import JOURNEY
from tests.conftest import PASSWORD
from tests.flywheel.registry.conftest import TINY_MODEL, TINY_TASKS
from tests.flywheel.triage.conftest import built_in_buckets, call, result, shop_record, store, user  # noqa: F401

pytestmark = [*JOURNEY, pytest.mark.usefixtures("built_in_buckets")]
# Two steps over both pairs, no held-out evaluation while training: the gate evaluates the version.
TINY_DPO = {"max_steps": 2, "learning_rate": 5e-3, "per_device_train_batch_size": 2, "warmup_ratio": 0.0,
            "eval_interval": 0, "checkpoint_interval": 0, "max_truncated_share": 1.0, "device": "cpu"}  # fmt: skip
TINY_GATE = {"device": "cpu", "batch_size": 8, "max_new_tokens": 16}
ORDERS = ("17", "18")


@pytest.fixture
def failures(store, settings, tmp_path):  # noqa: F811
    """Two failed refunds of the shop agent (refund_order where lookup_order was due), and its held-out tasks."""
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    records = [
        shop_record(f"refund-{order}", [
            user(f"Please refund order {order}."), call("refund_order", {"order_id": order, "amount": 500}, "c1"),
            result("refund_order", "Error: more than the order's total", error=True, call_id="c1")])
        for order in ORDERS
    ]  # fmt: skip
    stored = store(*records)
    agent = Agent.objects.get(name="shop")
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="heldout", agent=agent, source_ref="tiny")
    heldout = snapshot_create(actor=None, name="shop held-out", split="heldout", agent=agent)
    return [stored[f"refund-{order}"] for order in ORDERS], heldout


def sign_in_again(page, sign_in, user) -> None:
    page.context.clear_cookies()
    sign_in(user, PASSWORD)


def test_reviewers_corrections_become_pairs_a_dpo_job_and_a_gated_version(
    page, live_server, make_user, sign_in, celery_worker_process, failures, settings
):
    trajectories, heldout = failures
    celery_worker_process("default,gpu", env={"REGISTRY_DIR": settings.REGISTRY_DIR})
    url = live_server.url

    # Reviewer: correct each failing call on its review page, then freeze the pairs.
    sign_in(make_user(Role.REVIEWER), PASSWORD)
    for trajectory in trajectories:
        page.goto(f"{url}/triage/review/{trajectory.pk}/")
        page.locator("a[data-correct]").click()  # the form opens on the failing step
        page.wait_for_url(f"**/triage/review/{trajectory.pk}/correct/**")
        assert page.locator("select[name=tool]").input_value() == "refund_order"  # what the agent did
        page.locator("select[name=tool]").select_option("lookup_order")
        order = trajectory.external_id.removeprefix("refund-")
        page.locator("textarea[name=arguments]").fill(json.dumps({"order_id": order}))
        page.get_by_role("button", name="Save the correction").click()
        page.wait_for_url(f"**/triage/review/{trajectory.pk}/")
        assert "a train preference pair" in page.locator("ul.messages").inner_text()
    assert Correction.objects.count() == 2 and PreferencePair.objects.filter(split="train").count() == 2

    page.goto(f"{url}/pairs/?agent=shop")
    assert page.locator("table.pairs tbody tr[data-pair]").count() == 2
    form = page.locator("#pair-snapshot-form")
    form.get_by_label("Name", exact=True).fill("shop corrections")
    form.get_by_label("Split", exact=True).select_option("train")
    form.get_by_label("Agent", exact=True).select_option(label="shop")
    form.get_by_role("button", name="Freeze the pairs").click()
    page.wait_for_url("**/snapshots/*/")
    pairs = TaskSetSnapshot.objects.get(name="shop corrections")
    assert (pairs.kind, pairs.task_count) == (SnapshotKind.PAIRS, 2)

    # Trainer: a dpo job on the pairs, from the launch form, with the tiny model.
    sign_in_again(page, sign_in, make_user(Role.TRAINER))
    launch_job(page, url, kind="dpo", snapshot_id=pairs.id, base_model=str(TINY_MODEL), hyperparameters=TINY_DPO)
    dpo_job = wait_for_job(page)
    assert dpo_job.kind == "dpo" and dpo_job.snapshot == pairs

    version = ModelVersion.objects.get(agent__name="shop")  # registered by the worker when the job succeeded
    assert version.training_job == dpo_job and version.snapshot_hash == pairs.content_hash

    # The version's page: gate it against the base model on the held-out snapshot, read the decision.
    page.goto(f"{url}/models/shop/v{version.number}/")
    page.locator("select[name=heldout_snapshot]").select_option(str(heldout.id))
    page.locator("textarea[name=options]").fill(json.dumps(TINY_GATE))
    page.get_by_role("button", name="Queue the gate").click()
    page.wait_for_url("**/jobs/*/")
    wait_for_job(page)
    gate = GateResult.objects.get(candidate=version)
    assert gate.status in (GateStatus.PASSED, GateStatus.FAILED) and gate.baseline is None  # the base model
    page.goto(f"{url}/models/shop/v{version.number}/")
    shown = page.locator("table.gate-criteria").first.inner_text()
    assert all(criterion["reason"] in shown for criterion in gate.criteria)
    assert gate.get_status_display() in page.locator(".badge", has_text=gate.get_status_display()).first.inner_text()
    page.get_by_role("link", name="Against the base model").click()
    page.wait_for_url(f"**/gates/{gate.id}/")
    assert page.get_by_role("heading", name=f"Base model vs {version.tag}").is_visible()
