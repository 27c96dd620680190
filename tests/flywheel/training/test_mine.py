"""Hard-task mining in the app: launching a mine job, freezing what it kept, and its page.

No worker runs here: a mine job is created running with the done event trainer would have sent
(its `mined.jsonl` written as `trainer.mine` writes it), then closed by `services.job_finish`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.datasets.models import Split, TaskSetSnapshot
from flywheel.training import services
from flywheel.training.models import Job, JobKind, JobState

pytestmark = pytest.mark.django_db
KEPT = ["simple_python_1", "workbench-customer_relationship_manager-26"]
METRICS = {"tasks": 5, "kept": 2, "all_solved": 1, "none_solved": 2, "mean_pass_rate": 0.3, "samples": 8,
           "min_solved": 1, "max_solved": 7, "histogram": {"0": 2, "2": 1, "5": 1, "8": 1}}  # fmt: skip


def mined_file(folder: Path, snapshot: TaskSetSnapshot, task_ids: list[str]) -> Path:
    """The kept tasks of `snapshot`, one task line each, as trainer.mine writes mined.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mined.jsonl"
    lines = [item.content for item in snapshot.items.order_by("position") if item.content["id"] in task_ids]
    path.write_text("".join(json.dumps(content) + "\n" for content in lines))
    return path


def finished_mine_job(snapshot: TaskSetSnapshot, mined: Path | None, *, exit_code: int = 0, **fields) -> Job:
    files = {"mined": str(mined), "pass_rates": str(Path(str(mined)).parent / "pass_rates.jsonl")} if mined else {}
    result = {"event": "done", "metrics": METRICS, "results": None, "files": files}
    job = Job.objects.create(kind=JobKind.MINE, state=JobState.RUNNING, snapshot=snapshot, base_model="demo",
                             attempts=1, result=result, **fields)  # fmt: skip
    return services.job_finish(job=job, exit_code=exit_code, stderr_tail="", cancelled=False)


# --- Launch -------------------------------------------------------------------------------------


def test_a_mine_job_launches_on_a_train_snapshot(make_user, tiny_train_snapshot):
    job = services.job_launch(actor=make_user(Role.TRAINER), kind="mine", snapshot=tiny_train_snapshot,
                              base_model="demo", hyperparameters={"samples": 4, "max_solved": 3})  # fmt: skip
    assert (job.kind, job.state, job.hyperparameters["samples"]) == (JobKind.MINE, JobState.QUEUED, 4)


def test_a_mine_job_on_a_held_out_snapshot_is_refused_before_queueing(tiny_snapshot):
    with pytest.raises(services.LaunchRefused, match="is a heldout snapshot; mine a train snapshot"):
        services.job_launch(actor=None, kind="mine", snapshot=tiny_snapshot, base_model="demo")
    assert not Job.objects.exists()


def test_a_mine_job_is_refused_a_held_out_snapshot_beside_its_train_snapshot(tiny_train_snapshot):
    # The same tasks under another name: a held-out snapshot (the launch form offers one to every kind).
    held_out = TaskSetSnapshot.objects.create(name="held", split=Split.HELDOUT, content_hash="h" * 64, task_count=5)
    with pytest.raises(services.LaunchRefused, match="reads its train snapshot only"):
        services.job_launch(actor=None, kind="mine", snapshot=tiny_train_snapshot, base_model="demo",
                            heldout_snapshot=held_out)  # fmt: skip


def test_mine_hyperparameters_are_checked_by_the_trainers_config(tiny_train_snapshot):
    with pytest.raises(services.LaunchRefused, match="temperature must be above 0"):
        services.job_launch(actor=None, kind="mine", snapshot=tiny_train_snapshot, base_model="demo",
                            hyperparameters={"temperature": 0})  # fmt: skip


def test_the_launch_form_queues_a_mine_job_and_refuses_a_held_out_snapshot(client, make_user, tiny_train_snapshot):
    client.force_login(make_user(Role.TRAINER))
    url = reverse("training:job_new")
    held_out = TaskSetSnapshot.objects.create(name="held", split=Split.HELDOUT, content_hash="h" * 64, task_count=5)
    refused = client.post(url, {"kind": "mine", "snapshot": held_out.pk, "base_model": "demo"})
    assert refused.status_code == 400 and "mine a train snapshot" in refused.content.decode()
    launched = client.post(url, {"kind": "mine", "snapshot": tiny_train_snapshot.pk, "base_model": "demo",
                                 "hyperparameters": '{"samples": 4}'})  # fmt: skip
    job = Job.objects.get(kind=JobKind.MINE)
    assert launched.status_code == 302 and job.snapshot == tiny_train_snapshot


# --- The mined snapshot -------------------------------------------------------------------------


def test_a_finished_mine_job_freezes_exactly_the_kept_tasks_as_one_train_snapshot(tiny_train_snapshot, tmp_path):
    before = TaskSetSnapshot.objects.count()
    job = finished_mine_job(tiny_train_snapshot, mined_file(tmp_path, tiny_train_snapshot, KEPT))
    assert job.state == JobState.SUCCEEDED
    mined = job.mined_snapshot
    assert mined is not None and TaskSetSnapshot.objects.count() == before + 1
    assert (mined.split, mined.task_count, mined.agent) == (Split.TRAIN, 2, tiny_train_snapshot.agent)
    assert mined.name == f"tiny-train-mined-{str(job.id)[:8]}"
    items = list(mined.items.order_by("position"))
    assert [item.content["id"] for item in items] == KEPT
    source = {item.task_id: item for item in tiny_train_snapshot.items.all()}
    assert all(item.content == source[item.task_id].content for item in items)
    assert mined.selection["mined_by_job"] == str(job.id) and mined.selection["samples"] == 8
    assert Job.objects.get(pk=job.pk).mined_snapshot == mined


def test_freezing_twice_makes_no_second_snapshot(tiny_train_snapshot, tmp_path):
    path = mined_file(tmp_path, tiny_train_snapshot, KEPT)
    job = finished_mine_job(tiny_train_snapshot, path)
    count = TaskSetSnapshot.objects.count()
    path.unlink()  # a second call reads nothing: the job already has its snapshot
    assert services.job_mined_snapshot_create(job=Job.objects.get(pk=job.pk)) == job.mined_snapshot
    services.job_finish(job=job, exit_code=0, stderr_tail="", cancelled=False)
    assert TaskSetSnapshot.objects.count() == count
    assert Job.objects.get(pk=job.pk).error == ""


def test_two_mine_jobs_that_kept_the_same_tasks_share_one_snapshot(tiny_train_snapshot, tmp_path):
    first = finished_mine_job(tiny_train_snapshot, mined_file(tmp_path / "a", tiny_train_snapshot, KEPT))
    count = TaskSetSnapshot.objects.count()
    second = finished_mine_job(tiny_train_snapshot, mined_file(tmp_path / "b", tiny_train_snapshot, KEPT))
    assert second.mined_snapshot == first.mined_snapshot and TaskSetSnapshot.objects.count() == count


def test_a_mine_job_that_kept_nothing_makes_no_snapshot(tiny_train_snapshot, tmp_path):
    count = TaskSetSnapshot.objects.count()
    job = finished_mine_job(tiny_train_snapshot, mined_file(tmp_path, tiny_train_snapshot, []))
    assert job.state == JobState.SUCCEEDED and job.mined_snapshot is None
    assert TaskSetSnapshot.objects.count() == count


def test_a_failed_mine_job_makes_no_snapshot(tiny_train_snapshot, tmp_path):
    count = TaskSetSnapshot.objects.count()
    job = finished_mine_job(tiny_train_snapshot, mined_file(tmp_path, tiny_train_snapshot, KEPT), exit_code=1)
    assert job.state == JobState.FAILED and job.mined_snapshot is None
    assert TaskSetSnapshot.objects.count() == count


def test_a_mined_file_that_cannot_be_read_leaves_the_job_succeeded_with_the_reason(tiny_train_snapshot, tmp_path):
    job = finished_mine_job(tiny_train_snapshot, tmp_path / "gone" / "mined.jsonl")
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.mined_snapshot is None
    assert job.error.startswith("the mined tasks could not be frozen")


# --- The page -----------------------------------------------------------------------------------


def test_the_job_page_shows_the_pass_histogram_and_links_the_mined_snapshot(
    client, make_user, tiny_train_snapshot, tmp_path
):
    job = finished_mine_job(tiny_train_snapshot, mined_file(tmp_path, tiny_train_snapshot, KEPT))
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_detail", args=[job.id])).content.decode()
    assert "Kept <strong>2</strong> of 5 train tasks; 1 solved every time, 2 never" in page
    assert 'data-solved="0"><td>0 of 8</td><td>2</td>' in page and 'data-solved="5"><td>5 of 8</td><td>1</td>' in page
    assert reverse("datasets:snapshot_detail", args=[job.mined_snapshot.pk]) in page
    assert 'id="job-charts"' not in page and "Train GRPO on the kept tasks" not in page


def test_a_trainer_can_launch_grpo_on_the_mined_snapshot_from_the_job_page(
    client, make_user, tiny_train_snapshot, tmp_path
):
    job = finished_mine_job(tiny_train_snapshot, mined_file(tmp_path, tiny_train_snapshot, KEPT))
    client.force_login(make_user(Role.TRAINER))
    page = client.get(reverse("training:job_detail", args=[job.id])).content.decode()
    link = f"{reverse('training:job_new')}?kind=grpo&amp;snapshot={job.mined_snapshot.pk}"
    assert link in page
    form = client.get(f"{reverse('training:job_new')}?kind=grpo&snapshot={job.mined_snapshot.pk}").content.decode()
    assert f'<option value="{job.mined_snapshot.pk}" selected>' in form
