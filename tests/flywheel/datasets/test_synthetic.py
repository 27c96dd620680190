"""Synthetic batches: generated and screened by the service (and by a real worker), previewed, accepted in bulk
into train only, marked synthetic, under the leakage rule; the pages' permissions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import agent_create, agent_update
from flywheel.datasets.models import BatchState, RegressionTask, SourceKind, Split, SyntheticBatch
from flywheel.datasets.services import (
    REJECTED_AT_ACCEPT,
    TEAM_ENVIRONMENT_SKIPPED,
    BatchRefused,
    BatchSettings,
    TaskOrigin,
    synthetic_batch_accept,
    synthetic_batch_create,
    synthetic_batch_generate,
    task_create,
)
from trainer.contracts import ExpectedCall, Task
from trainer.spec.synthetic import FILTERS
from trainer.spec.workbench import tools_by_domain

FACTORIAL = {"type": "function", "function": {"name": "math.factorial", "description": "Factorial of a number.",
             "parameters": {"type": "object", "properties": {"number": {"type": "integer"}},
                            "required": ["number"]}}}  # fmt: skip
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather.get",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
MANUAL = TaskOrigin(source_kind=SourceKind.MANUAL)


def a_task(id_: str, request: str, tool: dict, arguments: dict) -> Task:
    return Task(id=id_, messages=[{"role": "user", "content": request}], tools=[tool],
                expected_calls=[ExpectedCall.exact(tool["function"]["name"], arguments)])  # fmt: skip


@pytest.fixture
def agent(db):
    agent = agent_create(actor=None, name="calc")
    seeds = [
        a_task("fact", "Calculate the factorial of 5 using math functions.", FACTORIAL, {"number": 5}),
        a_task("fact2", "Give me the factorial of 12.", FACTORIAL, {"number": 12}),
        a_task("rain", "Will it rain in Paris tomorrow?", WEATHER, {"city": "Paris"}),
        a_task("rain2", "Is it sunny in Berlin today?", WEATHER, {"city": "Berlin"}),
    ]
    for seed in seeds:
        task_create(actor=None, task=seed, split=Split.TRAIN, agent=agent, origin=MANUAL)
    # Close to what varying `fact` gives ("... factorial of 12 using math functions."), not the same text.
    held = a_task("held", "Calculate the factorial of 12 using math functions, please!", FACTORIAL, {"number": 12})
    task_create(actor=None, task=held, split=Split.HELDOUT, agent=agent, origin=MANUAL)
    return agent


def generated(agent, **settings) -> SyntheticBatch:
    batch = synthetic_batch_create(actor=None, agent=agent, settings=BatchSettings(**settings))
    return synthetic_batch_generate(batch_id=batch.pk)


def test_a_batch_reports_generated_rejected_by_each_filter_and_accepted(agent):
    batch = generated(agent)
    report = batch.report
    assert batch.state == BatchState.READY and batch.seed_count == 4
    assert report["generated"] == batch.candidates.count() > 0
    assert report["accepted"] == batch.candidates.filter(rejected_by="").count()
    for name, total in report["rejected"].items():
        assert batch.candidates.filter(rejected_by=name).count() == total
    assert report["accepted"] + sum(report["rejected"].values()) == report["generated"]


def test_a_variant_near_a_held_out_task_is_rejected_naming_it(agent):
    batch = generated(agent, methods=("values",))
    rejected = batch.candidates.get(content__messages__0__content="Calculate the factorial of 12 using math functions.")
    assert rejected.rejected_by == "heldout_near_duplicate" and "held-out task held" in rejected.reason
    assert rejected.seed_task.external_id == "fact" and rejected.change == "math.factorial.number: 5 → 12"


def test_generating_twice_stores_the_candidates_once(agent):
    batch = generated(agent)
    again = synthetic_batch_generate(batch_id=batch.pk)
    assert again.state == BatchState.READY and again.candidates.count() == batch.report["generated"]


def test_accepting_stores_the_kept_variants_as_synthetic_train_tasks(agent):
    batch = generated(agent)
    kept = batch.report["accepted"]
    batch = synthetic_batch_accept(actor=None, batch=batch)
    tasks = RegressionTask.objects.filter(source_kind=SourceKind.SYNTHETIC)
    assert batch.state == BatchState.ACCEPTED and batch.report["stored"] == tasks.count() == kept > 0
    assert set(tasks.values_list("split", flat=True)) == {Split.TRAIN}
    assert all(str(batch.pk) in task.source_ref and task.synthetic_candidate.batch_id == batch.pk for task in tasks)
    with pytest.raises(BatchRefused, match="only a batch ready"):
        synthetic_batch_accept(actor=None, batch=batch)
    assert RegressionTask.objects.filter(source_kind=SourceKind.SYNTHETIC).count() == kept


def test_a_variant_whose_prompt_became_held_out_is_refused_at_accept_and_the_rest_stored(agent):
    batch = generated(agent)
    candidate = batch.candidates.filter(rejected_by="", method="paraphrase").first()
    late = Task.from_json({**candidate.content, "id": "late-held-out"})
    task_create(actor=None, task=late, split=Split.HELDOUT, agent=agent, origin=MANUAL)
    batch = synthetic_batch_accept(actor=None, batch=batch)
    candidate.refresh_from_db()
    assert candidate.rejected_by == REJECTED_AT_ACCEPT and "leaks into Held-out" in candidate.reason
    assert candidate.task is None and batch.report["refused_at_accept"] == 1
    assert batch.report["stored"] == batch.report["accepted"] - 1


def test_synthetic_tasks_do_not_seed_the_next_batch(agent):
    synthetic_batch_accept(actor=None, batch=generated(agent))
    assert generated(agent, seed=1).seed_count == 4


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"methods": ("telepathy",)}, "unknown method"), ({"verifier": "vibes"}, "unknown verifier"),
     ({"threshold": 1.5}, "thresholds")],
)  # fmt: skip
def test_bad_settings_are_refused_and_store_nothing(agent, settings, message):
    with pytest.raises(BatchRefused, match=message):
        synthetic_batch_create(actor=None, agent=agent, settings=BatchSettings(**settings))
    assert not SyntheticBatch.objects.exists()


def test_an_agent_without_train_tasks_has_nothing_to_vary(db):
    with pytest.raises(BatchRefused, match="no train tasks"):
        synthetic_batch_create(actor=None, agent=agent_create(actor=None, name="empty"), settings=BatchSettings())


# --- pages ---------------------------------------------------------------------------------


def test_a_reviewer_previews_and_accepts_a_batch(client, make_user, agent):
    batch = generated(agent)
    client.force_login(make_user(Role.REVIEWER, agents=[agent]))
    page = client.get(reverse("datasets:synthetic_detail", args=[batch.pk])).content.decode()
    assert "Calculate the factorial of 12 using math functions." in page  # rejected, shown under its filter
    assert "heldout_near_duplicate" in page and "similarity" in page
    assert f"Accept {batch.report['accepted']} variants into train" in page
    response = client.post(reverse("datasets:synthetic_accept", args=[batch.pk]))
    assert response.status_code == 302
    assert RegressionTask.objects.filter(source_kind=SourceKind.SYNTHETIC).count() == batch.report["accepted"]
    again = client.post(reverse("datasets:synthetic_accept", args=[batch.pk]))
    assert again.status_code == 400 and "only a batch ready" in again.content.decode()


def test_the_form_refuses_bad_input_with_the_reason(client, make_user, agent):
    client.force_login(make_user(Role.REVIEWER, agents=[agent]))
    response = client.post(reverse("datasets:synthetic_new"), {"agent": agent.pk, "per_method": 2, "seed": 0,
                                                               "verifier": "tool_call", "threshold": 0.8,
                                                               "heldout_threshold": 0.6})  # fmt: skip
    assert response.status_code == 400 and "methods" in response.context["form"].errors
    assert not SyntheticBatch.objects.exists()


def test_a_viewer_may_not_accept_and_an_outsider_cannot_see_the_batch(client, make_user, agent):
    batch = generated(agent)
    client.force_login(make_user(Role.VIEWER, agents=[agent]))
    assert client.post(reverse("datasets:synthetic_accept", args=[batch.pk])).status_code == 403
    client.force_login(make_user(Role.REVIEWER, agents=[agent_create(actor=None, name="other")]))
    assert client.get(reverse("datasets:synthetic_detail", args=[batch.pk])).status_code == 404
    assert client.post(reverse("datasets:synthetic_accept", args=[batch.pk])).status_code == 404
    assert str(batch.pk) not in client.get(reverse("datasets:synthetic_list")).content.decode()
    batch.refresh_from_db()
    assert batch.state == BatchState.READY


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_generates_the_batch_a_reviewer_asked_for(client, make_user, agent, celery_worker_process):
    celery_worker_process("default")
    client.force_login(make_user(Role.REVIEWER, agents=[agent]))
    form = {"agent": agent.pk, "methods": ["values", "paraphrase"], "per_method": 2, "seed": 0,
            "verifier": "tool_call", "threshold": 0.8, "heldout_threshold": 0.6}  # fmt: skip
    response = client.post(reverse("datasets:synthetic_new"), form)
    assert response.status_code == 302
    batch = SyntheticBatch.objects.get()
    deadline = time.monotonic() + 60
    while SyntheticBatch.objects.get().state == BatchState.QUEUED and time.monotonic() < deadline:
        time.sleep(0.3)
    batch.refresh_from_db()
    assert batch.state == BatchState.READY, batch.error
    assert batch.report["generated"] == batch.candidates.count() > 0


# --- a model's paraphrases: the synth job ---------------------------------------------------


def synth_job(agent, tmp_path, lines: list[dict]):
    from flywheel.datasets.services import snapshot_create
    from flywheel.training.models import Job, JobKind, JobState

    snapshot = snapshot_create(actor=None, name="calc train", split=Split.TRAIN, agent=agent)
    path = tmp_path / "variants.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Job.objects.create(kind=JobKind.SYNTH, state=JobState.SUCCEEDED, snapshot=snapshot, agent=agent,
                              base_model="tiny", hyperparameters={"paraphrases": 2},
                              result={"metrics": {}, "files": {"variants": str(path)}})  # fmt: skip


def model_line(request: str, rejected_by: str = "", number: int = 5) -> dict:
    task = a_task(f"fact~model_paraphrase{number}", request, FACTORIAL, {"number": number})
    return {"task": task.to_json(), "seed_id": "fact", "method": "model_paraphrase", "change": "request: …",
            "rejected_by": rejected_by, "reason": "the job said so" if rejected_by else ""}  # fmt: skip


def test_a_finished_synth_jobs_variants_become_a_batch_once(agent, tmp_path):
    from flywheel.training.signals import job_finished

    lines = [model_line("Work out 5 factorial for me."), model_line("Compute five factorial.", "values_kept"),
             model_line("Work out a factorial: 5.", number=-1)]  # fmt: skip
    lines[2]["task"]["tools"][0]["function"]["parameters"]["properties"]["number"]["minimum"] = 0
    job = synth_job(agent, tmp_path, lines)
    job_finished.send(sender=None, job=job)
    job_finished.send(sender=None, job=job)
    batch = SyntheticBatch.objects.get(job_id=job.pk)
    assert batch.state == BatchState.READY and batch.methods == ["model_paraphrase"] and batch.seed_count == 4
    assert [c.rejected_by for c in batch.candidates.order_by("position")] == ["", "values_kept", "schema"]
    assert batch.report["accepted"] == 1 and batch.report["rejected"]["values_kept"] == 1
    assert batch.candidates.first().seed_task.external_id == "fact"
    synthetic_batch_accept(actor=None, batch=batch)
    assert RegressionTask.objects.get(source_kind=SourceKind.SYNTHETIC).content["messages"][0]["content"] == (
        "Work out 5 factorial for me."
    )


def test_a_synth_job_varies_a_train_snapshot_only(agent, make_user):
    from flywheel.datasets.services import snapshot_create
    from flywheel.training.services import LaunchRefused, job_launch

    trainer = make_user(Role.TRAINER, agents=[agent])
    heldout = snapshot_create(actor=None, name="calc held-out", split=Split.HELDOUT, agent=agent)
    with pytest.raises(LaunchRefused, match="varies train tasks"):
        job_launch(actor=trainer, kind="synth", snapshot=heldout, base_model="tiny", agent=agent)
    train = snapshot_create(actor=None, name="calc train", split=Split.TRAIN, agent=agent)
    job = job_launch(actor=trainer, kind="synth", snapshot=train, heldout_snapshot=heldout, base_model="tiny",
                     agent=agent, hyperparameters={"paraphrases": 2})  # fmt: skip
    assert job.kind == "synth" and job.heldout_snapshot == heldout


def test_the_launch_forms_synth_defaults_are_a_valid_synth_config():
    from flywheel.training.forms import DEFAULT_HYPERPARAMETERS
    from flywheel.training.models import JobKind
    from trainer.spec.config import config_from_json
    from trainer.spec.synth import SynthConfig

    config = config_from_json(SynthConfig, DEFAULT_HYPERPARAMETERS[JobKind.SYNTH], "synth hyperparameters")
    assert config.heldout_threshold == 0.6 and config.paraphrases == 2


def test_the_preview_reads_in_a_number_of_queries_that_does_not_grow_with_its_variants(client, make_user, agent):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(make_user(Role.REVIEWER, agents=[agent]))
    small = generated(agent, methods=("paraphrase",), per_method=1)
    for number in range(30):
        more = a_task(
            f"sq{number}",
            f"Homework set {number}: the factorial of {number + 100}.",
            FACTORIAL,
            {"number": number + 100},
        )
        task_create(actor=None, task=more, split=Split.TRAIN, agent=agent, origin=MANUAL)
    big = generated(agent, seed=1)
    counts = []
    for batch in (small, big):
        with CaptureQueriesContext(connection) as queries:
            page = client.get(reverse("datasets:synthetic_detail", args=[batch.pk]))
        assert page.status_code == 200
        counts.append(len(queries))
    assert big.report["generated"] > 10 * small.report["generated"]
    # A query per filter group at most, never one per variant.
    assert counts[1] <= counts[0] + len(FILTERS), counts


def test_the_sweeper_resends_a_queued_batch_whose_message_was_lost_and_nothing_else(agent, monkeypatch):
    from datetime import timedelta

    from flywheel.datasets import tasks
    from flywheel.datasets.services import synthetic_batches_sweep

    sent: list[str] = []
    monkeypatch.setattr(tasks.generate_synthetic_batch, "delay", sent.append)
    lost = synthetic_batch_create(actor=None, agent=agent, settings=BatchSettings())  # on_commit never ran
    done = generated(agent, seed=1)
    assert synthetic_batches_sweep(grace=timedelta(seconds=1)) == []  # too fresh: its message may be on its way
    assert synthetic_batches_sweep(grace=timedelta(0)) == [lost.pk] and sent == [str(lost.pk)]
    lost.refresh_from_db()
    assert lost.dispatched_at is not None and done.pk not in synthetic_batches_sweep(grace=timedelta(0))
    assert synthetic_batches_sweep(grace=timedelta(0)) == []  # sent: not again until the resend delay


# --- the environment filter: variants played in the agent's environment -------------------

WORKPLACE_TOOLS = Path(__file__).resolve().parents[4] / "shared" / "external" / "nemo_gym" / "workplace_assistant"


def delete_event(event_id: str) -> Task:
    tools = tools_by_domain(WORKPLACE_TOOLS / "example.jsonl")["calendar"]
    return Task(id=f"delete-{event_id}", messages=[{"role": "user", "content": f"Delete event {event_id} please."}],
                tools=tools, expected_calls=[ExpectedCall.exact("calendar_delete_event", {"event_id": event_id})])


@pytest.fixture
def workplace_agent(db):
    agent = agent_create(actor=None, name="office", environment="workbench")
    for event_id in ("00000013", "99999999"):  # a row of WorkBench's calendar, and none
        task_create(actor=None, task=delete_event(event_id), split=Split.TRAIN, agent=agent, origin=MANUAL)
    return agent


def test_variants_are_played_in_the_agents_workbench_and_those_that_fail_there_rejected(workplace_agent):
    batch = generated(workplace_agent, methods=("paraphrase",))
    assert batch.state == BatchState.READY, batch.error
    assert batch.environment == "workbench" and batch.report["environment"]["applied"] is True
    failing = batch.candidates.filter(seed_task__external_id="delete-99999999")
    assert failing.exists() and set(failing.values_list("rejected_by", flat=True)) == {"environment"}
    assert failing.first().reason == "call 1, calendar_delete_event, fails in workbench: Event not found."
    working = batch.candidates.filter(seed_task__external_id="delete-00000013")
    assert working.filter(rejected_by="").exists() and not working.filter(rejected_by="environment").exists()
    assert batch.report["rejected"]["environment"] == failing.count()


def test_the_batch_page_shows_the_environment_and_whether_its_filter_applied(client, make_user, workplace_agent):
    batch = generated(workplace_agent, methods=("paraphrase",))
    client.force_login(make_user(Role.REVIEWER, agents=[workplace_agent]))
    page = client.get(reverse("datasets:synthetic_detail", args=[batch.pk])).content.decode()
    assert "<dd id=\"batch-environment\">workbench · environment filter applied: each variant&#x27;s expected " \
           "calls were played in workbench</dd>" in page  # fmt: skip
    assert "Rejected by environment" in page and "Event not found." in page


def test_an_environment_that_cannot_judge_variants_is_reported_not_applied(client, make_user, workplace_agent):
    agent_update(actor=None, agent=workplace_agent, description="", tools=[], environment="replay")
    batch = generated(workplace_agent, methods=("paraphrase",))
    assert batch.environment == "replay" and batch.report["environment"]["applied"] is False
    assert "environment" not in batch.report["rejected"]
    assert not batch.candidates.filter(rejected_by="environment").exists()
    client.force_login(make_user(Role.REVIEWER, agents=[workplace_agent]))
    page = client.get(reverse("datasets:synthetic_detail", args=[batch.pk])).content.decode()
    assert "environment filter not applied: replay cannot judge variants: replay answers only" in page
    assert "Rejected by environment" not in page


def test_a_teams_environment_is_not_run_in_the_apps_workers(settings, workplace_agent):
    orders = "trainer.examples.orders:environment"
    settings.TRAINER_ENVIRONMENTS = [orders]
    agent_update(actor=None, agent=workplace_agent, description="", tools=[], environment=orders)
    batch = generated(workplace_agent, methods=("paraphrase",))
    assert batch.report["environment"] == {"name": orders, "applied": False,
                                           "skipped": f"{orders}: {TEAM_ENVIRONMENT_SKIPPED}"}  # fmt: skip


def test_a_missing_sandbox_fails_the_batch_with_the_reason(monkeypatch, workplace_agent, tmp_path):
    monkeypatch.setenv("FLYWHEEL_WORKBENCH_DIR", str(tmp_path / "nowhere"))
    batch = generated(workplace_agent, methods=("paraphrase",))
    assert batch.state == BatchState.FAILED and "nowhere" in batch.error and not batch.candidates.exists()


def test_a_synth_jobs_environment_and_its_filters_word_reach_the_batch(agent, tmp_path):
    from flywheel.training.signals import job_finished

    job = synth_job(agent, tmp_path, [model_line("Work out 5 factorial for me."),
                                      model_line("Work out five factorial: 5.", "environment")])  # fmt: skip
    played = {"name": "workbench", "applied": True, "skipped": ""}
    job.hyperparameters, job.result = {"environment": "workbench"}, {**job.result, "metrics": {"environment": played}}
    job.save()
    job_finished.send(sender=None, job=job)
    batch = SyntheticBatch.objects.get(job_id=job.pk)
    assert batch.environment == "workbench" and batch.report["environment"] == played
    assert batch.report["rejected"]["environment"] == 1 and batch.report["accepted"] == 1


def test_a_synth_job_takes_the_agents_environment_unless_the_launch_names_one(workplace_agent, make_user):
    from flywheel.datasets.services import snapshot_create
    from flywheel.training.services import job_launch

    trainer = make_user(Role.TRAINER, agents=[workplace_agent])
    train = snapshot_create(actor=None, name="office train", split=Split.TRAIN, agent=workplace_agent)
    job = job_launch(actor=trainer, kind="synth", snapshot=train, base_model="tiny", agent=workplace_agent)
    assert job.hyperparameters["environment"] == "workbench"
    named = job_launch(actor=trainer, kind="synth", snapshot=train, base_model="tiny", agent=workplace_agent,
                       hyperparameters={"environment": None})  # fmt: skip
    assert named.hyperparameters["environment"] is None
