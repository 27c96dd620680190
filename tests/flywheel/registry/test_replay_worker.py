"""A replay on real processes: launched from the trajectory's page, run by a real Celery worker on the `gpu`
queue with the tiny model and a version's adapter, recorded with its scores, while the app's live server
keeps answering with the live version."""

from __future__ import annotations

import io
import json
import time

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.registry import services, serving
from flywheel.registry.models import Deployment, LivePointer, Replay, ReplayStatus
from flywheel.training import runner
from flywheel.training.models import JobState, Sample
from tests.flywheel.registry.conftest import QUESTION
from tests.flywheel.registry.test_replay import failing_record
from tests.flywheel.training.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]
OPTIONS = json.dumps({"device": "cpu", "max_new_tokens": 24})


def wait_for_replay(replay: Replay, timeout: float = 180) -> Replay:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replay.refresh_from_db()
        if replay.status != ReplayStatus.PENDING:
            return replay
        time.sleep(0.3)
    replay.job.refresh_from_db()
    raise AssertionError(f"replay still pending after {timeout} s; job {replay.job.state}: {replay.job.log_tail}")


def live_answer(client) -> tuple[str, str]:
    """The live server's answer to the chat question, and the adapter hash that answered it."""
    body = {"model": "support-bot", "messages": QUESTION, "max_tokens": 8}
    answer = client.post(reverse("registry:chat_completions"), body, content_type="application/json").json()
    return answer["choices"][0]["message"]["content"], answer["flywheel"]["adapter_sha256"]


def test_a_replay_of_a_candidate_runs_on_a_real_worker_and_the_live_version_keeps_answering(
    client, managed_server, make_user, register, celery_worker_process
):
    celery_worker_process("gpu")
    stream_ingest(stream=io.BytesIO(json.dumps(failing_record()).encode()), options=IngestOptions(format="native"))
    trajectory = Trajectory.objects.get(external_id="run-1")
    live, candidate, approver = register(0), register(1), make_user(Role.APPROVER)
    services.version_promote(actor=approver, version=live, reason="first ship")
    client.force_login(approver)
    before = live_answer(client)
    assert before[1] == live.adapter_sha256
    pid = serving.MANAGED._process.pid

    url = reverse("registry:replay_launch", args=[trajectory.pk])
    for version in (candidate, live):
        assert client.post(url, {"version": version.pk, "options": OPTIONS}).status_code == 302
    replays = {replay.version: wait_for_replay(replay) for replay in Replay.objects.all()}

    for version, replay in replays.items():
        assert replay.status == ReplayStatus.DONE, replay.error
        assert replay.job.state == JobState.SUCCEEDED and replay.job.adapter.endswith(version.storage_path)
        assert replay.usage["completion_tokens"] > 0 and replay.usage["prompt_tokens"] > 0
        assert replay.scores["unsafe"] is False and replay.scores["reward"] is None  # no expected answer known
        # The recorded call passed "17" where the schema wants an integer: scored as the replay is.
        assert replay.original_scores["schema_valid"] is False and replay.original_scores["valid_json"] is True
        [sample] = Sample.objects.filter(job=replay.job)
        assert sample.completion == replay.answer and sample.prompt == "Where is order 17?"
    assert replays[candidate].was_live is False and replays[live].was_live is True
    # The live version is untouched: the pointer, its history, and what the live server answers (same process).
    assert LivePointer.objects.get(agent=trajectory.agent).version == live and Deployment.objects.count() == 1
    assert live_answer(client) == before and serving.MANAGED._process.pid == pid

    page = client.get(reverse("registry:trajectory_replays", args=[trajectory.pk])).content.decode()
    assert "support-bot:v1" in page and "support-bot:v2" in page and page.count(">answered<") == 2

    # A second delivery of a finished replay's job runs nothing and records nothing new.
    job = replays[candidate].job
    assert runner.job_run(job_id=job.pk, worker="duplicate") is None
    job.refresh_from_db()
    assert job.attempts == 1 and Sample.objects.filter(job=job).count() == 1
    assert services.replay_result_store(job=job) is None
    assert wait_for(job, ("succeeded",)).state == "succeeded"
