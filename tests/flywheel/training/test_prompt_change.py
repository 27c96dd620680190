"""The prompt-change path: its form, the eval job it launches, and the paired view against the baseline."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.datasets.importers import read
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.registry.selectors import NotComparable, eval_comparison
from flywheel.training.models import EvalRun, Job, JobState
from tests.flywheel.training.conftest import TINY_MODEL, TINY_TASKS, wait_for
from tests.flywheel.training.test_views import RATES, make_job

PREAMBLE = "Call exactly one tool. Use the triangle tool for triangles."
TASK_IDS = [json.loads(line)["id"] for line in TINY_TASKS.read_text().splitlines()]
TINY_EVAL = {"verifier": "tool_call", "device": "cpu", "batch_size": 8, "max_new_tokens": 16, "sample_events": 0}


@pytest.fixture
def heldout(db):
    agent = Agent.objects.create(name="calc")
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="heldout", agent=agent, source_ref="tiny")
    return snapshot_create(actor=None, name="calc held-out", split="heldout", agent=agent)


def result(task_id: str, correct: bool, **extra) -> dict:
    return {"task_id": task_id, "bucket": "wrong_tool", "valid_json": True, "correct_tool": correct,
            "correct_arguments": correct, "unsafe_action": False, "latency_s": 0.1, "prompt_tokens": 100,
            "completion_tokens": 10, **extra}  # fmt: skip


def stored_run(snapshot, passed: set[str], **job_fields) -> EvalRun:
    job = make_job(snapshot, kind="eval", state="succeeded", agent=snapshot.agent, **job_fields)
    results = [result(task_id, task_id in passed) for task_id in TASK_IDS]
    return EvalRun.objects.create(job=job, snapshot=snapshot, model_label="tiny", metrics=RATES, results=results)


# --- The paired comparison of two evaluations (selector) -------------------------------------------------


@pytest.mark.django_db
def test_two_evaluations_of_one_snapshot_are_paired_and_decided_as_the_gate_decides(heldout):
    baseline = stored_run(heldout, passed={TASK_IDS[0]})
    changed = stored_run(heldout, passed=set(TASK_IDS[1:]), hyperparameters={"system_preamble": PREAMBLE})
    compared = eval_comparison(baseline=baseline, candidate=changed)
    gain = next(c for c in compared.decision["criteria"] if c["name"] == "gain")
    assert (gain["values"]["improved"], gain["values"]["worsened"]) == (4, 1)  # McNemar's discordant pairs
    assert gain["values"]["baseline_rate"] == 0.2 and gain["values"]["candidate_rate"] == 0.8
    assert not compared.decision["passed"]  # 4 vs 1 over 5 tasks: exact McNemar p = 0.375, within noise
    assert [row["task_id"] for row in compared.view.fixed] == TASK_IDS[1:]
    assert [row["task_id"] for row in compared.view.broken] == [TASK_IDS[0]]
    breakage = next(c for c in compared.decision["criteria"] if c["name"] == "heldout_breakage")
    assert breakage["values"]["broken"] == [TASK_IDS[0]]


@pytest.mark.django_db
def test_evaluations_of_other_snapshots_or_other_tasks_are_not_paired(heldout, tiny_snapshot):
    baseline = stored_run(heldout, passed=set())
    with pytest.raises(NotComparable, match="different snapshots"):
        eval_comparison(baseline=baseline, candidate=stored_run(tiny_snapshot, passed=set()))
    sampled = stored_run(heldout, passed=set())
    EvalRun.objects.filter(pk=sampled.pk).update(results=sampled.results[:3])  # a sample of the snapshot
    sampled.refresh_from_db()
    with pytest.raises(NotComparable, match="evaluated on different tasks"):
        eval_comparison(baseline=baseline, candidate=sampled)


# --- The pages ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_comparison_page_shows_the_gates_decision_and_flips_to_members_only(client, make_user, heldout):
    baseline = stored_run(heldout, passed={TASK_IDS[0]})
    changed = stored_run(heldout, passed=set(TASK_IDS[1:]), hyperparameters={"system_preamble": PREAMBLE})
    url = reverse("registry:eval_compare", args=[baseline.job_id, changed.job_id])
    client.force_login(make_user(Role.VIEWER, agents=[heldout.agent]))
    page = client.get(url).content.decode()
    assert "Baseline vs changed prompt" in page and PREAMBLE in page
    assert 'class="data gate-criteria"' in page and "4 fixed, 1 broken" in page
    assert "<th>Changed prompt</th>" in page and "Fixed: fail → pass (4)" in page
    client.force_login(make_user(Role.VIEWER, agents=[Agent.objects.create(name="elsewhere")]))
    assert client.get(url).status_code == 404
    client.logout()
    assert client.get(url).status_code == 302


@pytest.mark.django_db
def test_the_comparison_page_says_why_two_evaluations_cannot_be_paired(client, make_user, heldout, tiny_snapshot):
    url = reverse("registry:eval_compare", args=[stored_run(heldout, set()).job_id,
                                                 stored_run(tiny_snapshot, set()).job_id])  # fmt: skip
    client.force_login(make_user(Role.ADMIN))
    response = client.get(url)
    assert response.status_code == 400 and "different snapshots" in response.content.decode()


@pytest.mark.django_db
def test_the_prompt_change_form_is_prefilled_and_launches_an_eval_of_the_changed_prompt(client, make_user, heldout):
    baseline = stored_run(heldout, passed=set(), hyperparameters=TINY_EVAL)
    url = reverse("training:prompt_change", args=[baseline.job_id])
    client.force_login(make_user(Role.VIEWER))
    assert client.get(url).status_code == 403
    client.force_login(make_user(Role.TRAINER))
    page = client.get(url).content.decode()
    described = json.loads(re.search(r'<textarea name="tool_descriptions"[^>]*>(.*?)</textarea>', page, re.S)
                           .group(1).replace("&quot;", '"'))  # fmt: skip
    assert described["calculate_triangle_area"].startswith("Calculate the area of a triangle")
    described["calculate_triangle_area"] = "Area of a triangle from its base and height. Use it for triangles."
    response = client.post(url, {"system_preamble": PREAMBLE, "tool_descriptions": json.dumps(described)})
    changed = Job.objects.exclude(pk=baseline.job_id).get()
    assert response.status_code == 302 and response["Location"] == reverse("training:job_detail", args=[changed.id])
    assert (changed.kind, changed.state, changed.snapshot, changed.base_model) == ("eval", JobState.QUEUED, heldout,
                                                                                   "demo")  # fmt: skip
    # The baseline's settings, plus the change: only the edited description is an override.
    assert changed.hyperparameters == {**TINY_EVAL, "system_preamble": PREAMBLE,
        "tool_descriptions": {"calculate_triangle_area": described["calculate_triangle_area"]}}  # fmt: skip


@pytest.mark.django_db
def test_a_prompt_change_that_changes_nothing_or_names_an_unknown_tool_is_refused(client, make_user, heldout):
    baseline = stored_run(heldout, passed=set())
    url = reverse("training:prompt_change", args=[baseline.job_id])
    client.force_login(make_user(Role.TRAINER))
    unchanged = client.post(url, {"system_preamble": "  ", "tool_descriptions": ""})
    assert unchanged.status_code == 400 and "nothing is changed" in unchanged.content.decode()
    unknown = client.post(url, {"system_preamble": PREAMBLE, "tool_descriptions": '{"fly": "to the moon"}'})
    assert unknown.status_code == 400 and "no such tool in the snapshot&#x27;s tasks: fly" in unknown.content.decode()
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_the_evaluation_page_offers_the_prompt_change_and_the_comparison(client, make_user, heldout):
    baseline = stored_run(heldout, passed=set())
    changed = stored_run(heldout, passed=set(), hyperparameters={"system_preamble": PREAMBLE})
    client.force_login(make_user(Role.TRAINER))
    page = client.get(reverse("training:eval_detail", args=[changed.job_id])).content.decode()
    assert "This evaluation changed the prompt" in page and PREAMBLE in page
    compare = reverse("registry:eval_compare", args=[baseline.job_id, changed.job_id])
    assert f'href="{compare}" data-compare-as-baseline' in page
    page = client.get(reverse("training:eval_detail", args=[baseline.job_id])).content.decode()
    prompt = reverse("training:prompt_change", args=[baseline.job_id])
    assert f'href="{prompt}" data-launch="prompt">Try a prompt change</a>' in page  # never right: a prompt first


# --- On a real worker, with the tiny model --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_changed_prompt_is_evaluated_by_a_real_worker_and_paired_with_its_baseline(
    client, make_user, heldout, celery_worker_process
):
    from flywheel.training import services

    celery_worker_process("gpu")
    trainer = make_user(Role.TRAINER)
    baseline_job = services.job_launch(actor=trainer, kind="eval", snapshot=heldout, base_model=str(TINY_MODEL),
                                       agent=heldout.agent, hyperparameters=TINY_EVAL)  # fmt: skip
    assert wait_for(baseline_job, ("succeeded", "failed")).state == "succeeded", baseline_job.error
    client.force_login(trainer)
    client.post(reverse("training:prompt_change", args=[baseline_job.id]), {"system_preamble": PREAMBLE})
    changed_job = wait_for(Job.objects.exclude(pk=baseline_job.pk).get(), ("succeeded", "failed"))
    assert changed_job.state == "succeeded", changed_job.error + changed_job.log_tail
    assert "prompt change: a system preamble" in changed_job.log_tail
    before = {row["task_id"]: row["prompt_tokens"] for row in EvalRun.objects.get(job=baseline_job).results}
    after = {row["task_id"]: row["prompt_tokens"] for row in EvalRun.objects.get(job=changed_job).results}
    assert before.keys() == after.keys() and all(after[task] > before[task] for task in before)
    page = client.get(reverse("registry:eval_compare", args=[baseline_job.id, changed_job.id]))
    assert page.status_code == 200 and "over 5 paired tasks" in page.content.decode()
