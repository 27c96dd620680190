"""PostgreSQL restarted under a running ingestion: the batch in flight runs again, whole, and nothing is lost.

The ingestion runs in processes of their own (`manage.py ingest`, or an upload on a real worker) on
a PostgreSQL of the test's own (`private_postgres`), which the test restarts while batches are
being stored; what was stored is then read straight from that database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.conftest import REPO_ROOT
from tests.faults.conftest import PrivatePostgres, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db]  # django_db: the test database whose schema is copied
RECORDS = 8_000
STEPS = 3


def write_records(path: Path) -> Path:
    with path.open("w") as out:
        for n in range(RECORDS):
            steps = [{"kind": "user", "text": f"question {n}"}, {"kind": "assistant", "text": f"answer {n}"},
                     {"kind": "user", "text": "thanks"}]  # fmt: skip
            out.write(json.dumps({"id": f"r{n}", "steps": steps}) + "\n")
    return path


def query(server: PrivatePostgres, sql: str) -> tuple:
    with psycopg.connect(server.url(), connect_timeout=2) as connection:
        return connection.execute(sql).fetchone()  # type: ignore[return-value]


def stored(server: PrivatePostgres) -> int:
    try:
        return query(server, "SELECT count(*) FROM ingest_trajectory")[0]
    except psycopg.OperationalError:
        return -1


def assert_every_record_stored_once_and_whole(server: PrivatePostgres) -> None:
    trajectories, distinct = query(server, "SELECT count(*), count(DISTINCT external_id) FROM ingest_trajectory")
    steps = query(server, "SELECT count(*) FROM ingest_step")[0]
    whole = f"step_count = {STEPS} AND (SELECT count(*) FROM ingest_step s WHERE s.trajectory_id = t.id) = {STEPS}"
    half_stored = query(server, f"SELECT count(*) FROM ingest_trajectory t WHERE NOT ({whole})")[0]
    assert (trajectories, distinct, steps, half_stored) == (RECORDS, RECORDS, RECORDS * STEPS, 0)


def app_env(server: PrivatePostgres, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A process of the app on the private PostgreSQL, with small batches."""
    env = {**os.environ, "DATABASE_URL": server.url(), "INGEST_BATCH_SIZE": "200",
           "FLYWHEEL_VAR_DIR": str(tmp_path / "var"), "MEDIA_ROOT": str(tmp_path / "media"), **extra}  # fmt: skip
    if "CELERY_BROKER_URL" not in extra:
        for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
            env.pop(name, None)  # suggestions' messages go to a broker folder of this test's own, not to shared Redis
    return env


def test_postgres_restarted_mid_ingestion_retries_the_batch_in_flight_and_stores_every_record_once_and_whole(
    private_postgres, tmp_path
):
    path = write_records(tmp_path / "records.jsonl")
    env = app_env(private_postgres, tmp_path)
    log = tmp_path / "ingest.log"
    with log.open("w") as errors:
        ingest = subprocess.Popen(
            [sys.executable, "manage.py", "ingest", str(path), "--format", "native", "--agent", "faults"],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=errors, text=True,
        )  # fmt: skip
        wait_until(lambda: stored(private_postgres) >= 1_000 or ingest.poll() is not None, 60, "1,000 stored")
        private_postgres.restart()
        stored_before = stored(private_postgres)
        output, _ = ingest.communicate(timeout=90)
    assert ingest.returncode == 0, log.read_text()[-3000:]
    assert 0 < stored_before < RECORDS, stored_before  # the restart came in the middle of the file
    assert "the database connection was lost" in log.read_text()  # a batch was cut off and ran again
    assert json.loads(output) == {"read": RECORDS, "stored": RECORDS, "duplicates": 0, "rejected": 0, "errors": []}
    assert_every_record_stored_once_and_whole(private_postgres)


CREATE_UPLOAD = """
from django.contrib.auth.models import User
from django.core.files import File
from flywheel.ingest.services import upload_create
with open({path!r}, "rb") as handle:
    upload = upload_create(user=User.objects.create_superuser("faults"), file=File(handle, name="records.jsonl"),
                           format="native", mapping={{}}, agent_name="faults")
print(upload.id)
"""


@pytest.mark.worker
def test_postgres_restarted_mid_upload_retries_the_batch_in_flight_within_the_same_attempt_and_loses_nothing(
    private_postgres, private_redis, celery_worker_process, tmp_path
):
    path = write_records(tmp_path / "records.jsonl")
    env = app_env(private_postgres, tmp_path, CELERY_BROKER_URL=private_redis.url,
                  CELERY_RESULT_BACKEND=private_redis.url)  # fmt: skip
    made = subprocess.run([sys.executable, "manage.py", "shell", "-c", CREATE_UPLOAD.format(path=str(path))],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)  # fmt: skip
    upload_id = made.stdout.split()[-1]
    worker = {name: env[name] for name in ("DATABASE_URL", "INGEST_BATCH_SIZE", "MEDIA_ROOT", "FLYWHEEL_VAR_DIR",
                                          "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")}  # fmt: skip
    celery_worker_process("default", env=worker)
    wait_until(lambda: stored(private_postgres) >= 1_000, 60, "1,000 stored")
    private_postgres.restart()

    def finished() -> bool:
        try:
            return query(private_postgres, f"SELECT status FROM ingest_upload WHERE id = '{upload_id}'")[0] != "running"
        except psycopg.OperationalError:
            return False

    wait_until(finished, 60, "the upload finishing")
    status, attempts, read, stored_count, duplicates, rejected = query(
        private_postgres,
        f"SELECT status, attempts, read, stored, duplicates, rejected FROM ingest_upload WHERE id = '{upload_id}'",
    )
    # One attempt: the batch ran again in place, no claim was lost to the restart and none had to take over.
    assert (status, attempts, read, stored_count, duplicates, rejected) == ("succeeded", 1, RECORDS, RECORDS, 0, 0)
    assert_every_record_stored_once_and_whole(private_postgres)
    assert "the database connection was lost" in (tmp_path / "worker-0.log").read_text()  # a batch was cut off
