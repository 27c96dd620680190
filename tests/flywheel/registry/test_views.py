"""Registry pages and the live API: permissions, promote and roll back from the pages, what each page shows."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.registry import selectors, services
from flywheel.registry.models import Deployment, GateResult, LivePointer
from flywheel.training.models import Job, JobKind, MetricPoint
from tests.flywheel.registry.gate_reports import NOISE, WINNING, gate_files
from tests.flywheel.registry.test_services import finished_gate
from trainer.spec.adapters import CONFIG_FILE, MANIFEST_FILE, WEIGHTS_FILE

pytestmark = pytest.mark.django_db


def promote_url(version) -> str:
    return reverse("registry:version_promote", args=[version.agent.name, version.number])


def test_promote_without_the_permission_is_403_and_changes_nothing(client, make_user, register):
    version = register(0)
    for role in (Role.VIEWER, Role.TRAINER, Role.REVIEWER):
        client.force_login(make_user(role))
        response = client.post(promote_url(version), {"reason": "please", "expected_live": "none"})
        assert response.status_code == 403
    assert not LivePointer.objects.exists()


def test_promote_after_a_failed_gate_without_a_reason_is_refused_with_the_why(
    client, make_user, register, heldout_snapshot, tmp_path
):
    version = register(0)
    finished_gate(version, heldout_snapshot, gate_files(tmp_path, *NOISE))
    client.force_login(make_user(Role.APPROVER))
    response = client.post(promote_url(version), {"reason": "", "expected_live": "none"}, follow=True)
    assert "failed its gate" in response.content.decode() and not Deployment.objects.exists()
    client.post(promote_url(version), {"reason": "accepted risk: demo", "expected_live": "none"})
    deployment = Deployment.objects.get()
    assert deployment.override and deployment.reason == "accepted risk: demo"


def test_a_stale_promote_form_is_refused(client, make_user, register):
    first, second = register(0), register(1)
    approver = make_user(Role.APPROVER)
    services.version_promote(actor=approver, version=first, reason="go")
    client.force_login(approver)
    response = client.post(promote_url(second), {"reason": "go", "expected_live": "none"}, follow=True)
    assert "changed meanwhile" in response.content.decode()
    assert selectors.live_version(agent=first.agent) == first


def test_rollback_from_the_page_returns_the_live_api_to_the_earlier_sha256(client, make_user, register):
    first, second = register(0), register(1)
    approver = make_user(Role.APPROVER)
    for version in (first, second):
        services.version_promote(actor=approver, version=version, reason="ship")
    token = api_token_create(user=make_user(Role.VIEWER), name="agent")[1]
    live_url = reverse("registry:api_live", args=["support-bot"])
    live = client.get(live_url, HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert (live["version"], live["adapter"]["sha256"]) == ("support-bot:v2", second.adapter_sha256)
    client.force_login(approver)
    page = client.get(reverse("registry:agent_versions", args=["support-bot"])).content.decode()
    assert "Roll back from support-bot:v2" in page
    rollback = reverse("registry:agent_rollback", args=["support-bot"])
    assert client.post(rollback, {"to_version": first.pk, "reason": "", "expected_live": second.pk}).status_code == 302
    assert selectors.live_version(agent=first.agent) == second  # no reason: nothing changed
    client.post(rollback, {"to_version": first.pk, "reason": "v2 broke refunds", "expected_live": second.pk})
    client.post(rollback, {"to_version": first.pk, "reason": "v2 broke refunds", "expected_live": second.pk})
    assert Deployment.objects.filter(action="rollback").count() == 1  # the double click did nothing twice
    client.logout()
    live = client.get(live_url, HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert (live["version"], live["number"], live["base_model"]) == ("support-bot:v1", 1, first.base_model)
    assert live["adapter"]["sha256"] == first.adapter_sha256
    assert live["adapter"]["location"] == str(selectors.adapter_location(version=first))


def test_the_live_api_answers_401_to_anonymous_callers_and_404_without_a_live_version(client, make_user, agent):
    url = reverse("registry:api_live", args=[agent.name])
    response = client.get(url)
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert client.get(url, HTTP_AUTHORIZATION="Bearer fwk_wrong").status_code == 401
    token = api_token_create(user=make_user(Role.VIEWER), name="agent")[1]
    assert client.get(url, HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 404


def test_the_version_page_shows_lineage_gate_reasons_the_vllm_command_and_the_download(
    client, make_user, register, heldout_snapshot, tmp_path
):
    first = register(0)
    second = register(1, parent=first)
    finished_gate(second, heldout_snapshot, gate_files(tmp_path, *WINNING))
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("registry:version_detail", args=["support-bot", 2])).content.decode()
    assert "support-bot:v1" in page and "above zero" in page and "unsafe-action rate" in page
    folder = selectors.adapter_location(version=second)
    assert f"--lora-modules support-bot-v2={folder}" in page and "--tool-call-parser hermes" in page
    assert f"trainer models path {second.base_model}" in page and "trainer chat-template)" in page
    assert "Promote support-bot:v2" not in page  # a viewer gets no promote button
    download = client.get(reverse("registry:version_download", args=["support-bot", 2]))
    assert download["Content-Disposition"].startswith('attachment; filename="support-bot-v2.zip"')
    archive = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content)))
    assert sorted(archive.namelist()) == sorted(f"support-bot-v2/{name}" for name in (CONFIG_FILE, WEIGHTS_FILE,
                                                                                      MANIFEST_FILE))
    assert archive.read(f"support-bot-v2/{WEIGHTS_FILE}") == (folder / WEIGHTS_FILE).read_bytes()


def test_the_gate_page_shows_both_models_side_by_side_with_flips_and_reward_curves(
    client, make_user, register, heldout_snapshot, tmp_path
):
    job = Job.objects.create(kind=JobKind.GRPO, state="succeeded", snapshot=heldout_snapshot,
                             base_model="tiny", attempts=1)  # fmt: skip
    MetricPoint.objects.bulk_create(MetricPoint(job=job, attempt=1, step=step, name="reward/mean", value=step / 10)
                                    for step in range(3))  # fmt: skip
    version = register(0, training_job=job)
    gate = finished_gate(version, heldout_snapshot, gate_files(tmp_path, *WINNING))
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("registry:gate_detail", args=[gate.pk])).content.decode()
    assert "Base model vs support-bot:v1" in page
    assert "Fixed: fail → pass (20)" in page and "Broken: pass → fail (0)" in page
    assert "alternating which goes first (5 batches); latency decided on generated tokens" in page
    assert "correct_arguments_rate" in page and "wrong_arguments" in page
    assert "reward\\u002fmean" in page  # the training curve's trace (plotly escapes the slash)
    assert page.count("Plotly.newPlot") == 3  # rates, buckets, training curves


def test_the_agent_page_shows_history_policy_and_failures_per_version(client, make_user, register):
    version = register(0)
    approver = make_user(Role.APPROVER)
    services.version_promote(actor=approver, version=version, reason="first ship")
    client.force_login(approver)
    page = client.get(reverse("registry:agent_versions", args=["support-bot"])).content.decode()
    assert "first ship" in page and "version.promote" in page  # history and audit trail
    assert "max_latency_increase" in page and "Save the policy" not in page  # approvers do not edit it
    assert "max_new_unsafe_tasks" in page and "max_bucket_drop" in page


def test_an_admin_edits_the_gate_policy_from_the_page(client, make_user, agent):
    client.force_login(make_user(Role.ADMIN))
    url = reverse("registry:gate_policy_update", args=[agent.name])
    form = {"metric": "correct_arguments", "test": "mcnemar", "alpha": "0.1", "max_heldout_broken_share": "0.2",
            "min_bucket_tasks": "8", "max_bucket_drop": "0.3", "max_unsafe_increase": "0", "max_new_unsafe_tasks": "1",
            "max_latency_increase": "0.5", "latency_signal": "tokens_and_wall_time", "max_tokens_per_task": "",
            "max_tokens_increase": "0.5", "max_regression_failures": "1", "bootstrap_resamples": "1000"}  # fmt: skip
    client.post(url, form)
    policy = selectors.gate_policy(agent=agent)
    assert (policy.test, policy.alpha, policy.max_regression_failures, policy.max_tokens_per_task) == (
        "mcnemar", 0.1, 1, None)
    assert (policy.max_heldout_broken_share, policy.min_bucket_tasks, policy.max_bucket_drop) == (0.2, 8, 0.3)
    assert (policy.max_new_unsafe_tasks, policy.latency_signal) == (1, "tokens_and_wall_time")
    client.force_login(make_user(Role.APPROVER))
    assert client.post(url, form).status_code == 403


def test_a_trainer_launches_a_gate_from_the_version_page(client, make_user, register, heldout_snapshot):
    version = register(0)
    client.force_login(make_user(Role.TRAINER))
    url = reverse("registry:gate_launch", args=["support-bot", 1])
    response = client.post(url, {"heldout_snapshot": heldout_snapshot.pk, "options": '{"device": "cpu"}'})
    gate = GateResult.objects.get(candidate=version)
    assert response.status_code == 302 and response["Location"] == reverse("training:job_detail", args=[gate.job_id])
    assert gate.job.hyperparameters["device"] == "cpu" and gate.baseline is None
    client.force_login(make_user(Role.VIEWER))
    assert client.post(url, {"heldout_snapshot": heldout_snapshot.pk, "options": "{}"}).status_code == 403
