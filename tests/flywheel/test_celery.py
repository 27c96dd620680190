"""Celery against the configured broker (Redis in CI) with a real worker process, not eager mode."""

from __future__ import annotations

import pytest
from django.db import transaction

from flywheel.celery import app
from flywheel.core.tasks import gpu_ping, ping
from flywheel.training.tasks import reap_jobs, run_job

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_tasks_are_routed_by_name_to_their_queue():
    assert app.amqp.router.route({}, ping.name)["queue"].name == "default"
    assert app.amqp.router.route({}, gpu_ping.name)["queue"].name == "gpu"
    assert app.amqp.router.route({}, run_job.name)["queue"].name == "gpu"
    assert app.amqp.router.route({}, reap_jobs.name)["queue"].name == "default"


def test_gpu_tasks_acknowledge_late_and_the_broker_outwaits_the_longest_job(settings):
    assert gpu_ping.acks_late and gpu_ping.reject_on_worker_lost
    assert app.conf.worker_prefetch_multiplier == 1
    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        assert app.conf.broker_transport_options["visibility_timeout"] > settings.JOB_MAX_SECONDS


def test_a_real_worker_runs_one_task_on_each_queue(celery_worker_process):
    app.control.purge()
    celery_worker_process("default,gpu")
    assert ping.delay().get(timeout=90)["queue"] == "default"
    assert gpu_ping.delay().get(timeout=90)["queue"] == "gpu"


def test_a_worker_on_default_only_leaves_gpu_jobs_queued(celery_worker_process):
    app.control.purge()
    celery_worker_process("default")
    gpu_result = gpu_ping.delay()
    assert ping.delay().get(timeout=90)["queue"] == "default"
    assert gpu_result.state == "PENDING"
    app.control.purge()


def queued_on_default() -> int:
    with app.connection_for_write() as connection:
        return connection.default_channel.queue_declare("default").message_count


def test_a_task_enqueued_on_commit_is_sent_only_when_the_transaction_commits():
    app.control.purge()
    with pytest.raises(RuntimeError), transaction.atomic():
        ping.delay_on_commit()
        raise RuntimeError("roll back")
    assert queued_on_default() == 0
    with transaction.atomic():
        ping.delay_on_commit()
        assert queued_on_default() == 0
    assert queued_on_default() == 1
    app.control.purge()
