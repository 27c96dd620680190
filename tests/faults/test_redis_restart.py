"""Redis (broker and result store) restarted under a running upload and under a running job.

A Redis of the test's own (`private_redis`) with nothing kept on disk, as CI runs it: a restart
loses every message in it. The work already claimed goes on while Redis is away and finishes once;
/healthz answers 503 naming the broker while it is down and 200 after; the worker reconnects by
itself (it runs a message sent after the restart), and a message delivered again starts nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.core.files.base import ContentFile
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory, Upload
from flywheel.ingest.services import upload_create, uploads_sweep
from flywheel.ingest.tasks import process_upload
from flywheel.training import services as training_services
from flywheel.training.models import Job, MetricPoint
from flywheel.training.tasks import run_job
from tests.faults.conftest import PrivateRedis
from tests.flywheel.training.conftest import TINY_MODEL, scripted_env, tiny_train_snapshot  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
RECORDS = 30_000
JOB_STEPS = 60
MESSAGE_SECONDS = 30


def poll(read: Callable[[], object], done: Callable[[object], bool], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {value!r} after {timeout} s")
        time.sleep(0.1)


def healthz(client) -> tuple[int, list[str]]:
    response = client.get(reverse("healthz"))
    return response.status_code, response.json().get("failing", [])


def down_then_up(redis: PrivateRedis, client, progress: Callable[[], int]) -> None:
    """Stop Redis, see /healthz fail on the broker and the work go on without it, then start Redis again."""
    assert healthz(client) == (200, [])
    redis.stop()
    assert healthz(client) == (503, ["broker"])
    at_stop = progress()
    poll(progress, lambda now: now > at_stop, 30, "progress with Redis down")  # type: ignore[operator]
    redis.start()
    assert healthz(client) == (200, [])


def records(count: int) -> bytes:
    return b"".join(b'{"id":"r%d","steps":[{"kind":"user","text":"q%d"}]}\n' % (n, n) for n in range(count))


def test_redis_restarted_during_an_upload_finishes_it_once_with_nothing_lost_and_healthz_503_then_200(
    client, make_user, celery_worker_process, private_redis, private_broker
):
    worker = celery_worker_process("default", env=private_broker, pool="prefork")
    user = make_user(Role.REVIEWER)
    upload = upload_create(user=user, file=ContentFile(records(RECORDS), name="records.jsonl"), format="native",
                           mapping={})  # fmt: skip

    def read() -> int:
        upload.refresh_from_db()
        return upload.read

    poll(read, lambda n: n >= 2_000, 60, "records read before the restart")  # type: ignore[operator]
    down_then_up(private_redis, client, read)
    poll(lambda: Upload.objects.get(pk=upload.pk).is_finished, bool, 90, "the upload finishing")
    upload.refresh_from_db()
    assert (upload.status, upload.attempts) == ("succeeded", 1), upload.failure
    assert (upload.read, upload.stored, upload.duplicates, upload.rejected) == (RECORDS, RECORDS, 0, 0)
    stored = Trajectory.objects.filter(upload=upload)
    assert stored.count() == RECORDS == stored.values("external_id").distinct().count()
    # The worker is back on the new Redis: it takes this message, a redelivery of the finished upload
    # (what a broker restored from disk would send), and claims nothing.
    process_upload.delay(str(upload.pk)).get(timeout=MESSAGE_SECONDS)
    assert Upload.objects.get(pk=upload.pk).attempts == 1
    assert uploads_sweep() == [] and worker.poll() is None


def test_redis_restarted_during_a_job_finishes_it_in_one_attempt_and_healthz_503_then_200(
    client,
    make_user,
    celery_worker_process,
    private_redis,
    private_broker,
    tiny_train_snapshot,  # noqa: F811
):
    worker = celery_worker_process("gpu", env={**scripted_env(), **private_broker}, pool="prefork")
    job = training_services.job_launch(
        actor=make_user(Role.TRAINER),
        kind="grpo",
        snapshot=tiny_train_snapshot,
        base_model=str(TINY_MODEL),
        hyperparameters={"max_steps": JOB_STEPS},
    )

    def steps() -> int:
        return MetricPoint.objects.filter(job=job).count()

    poll(steps, lambda n: n >= 5, 60, "metric points before the restart")  # type: ignore[operator]
    down_then_up(private_redis, client, steps)
    poll(lambda: Job.objects.get(pk=job.pk).state, lambda state: state in ("succeeded", "failed"), 60, "the job")
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("succeeded", 1), job.error + job.log_tail
    assert set(MetricPoint.objects.filter(job=job).values_list("attempt", flat=True)) == {1}
    assert steps() == JOB_STEPS
    run_job.delay(str(job.pk)).get(timeout=MESSAGE_SECONDS)  # a redelivery: the claim lets nothing in
    job.refresh_from_db()
    assert (job.state, job.attempts) == ("succeeded", 1)
    assert training_services.jobs_reap() == [] and worker.poll() is None
