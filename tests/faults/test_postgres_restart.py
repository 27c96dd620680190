"""PostgreSQL restarted under a running ingestion: the batch in flight runs again, whole, and nothing is lost.

The ingestion is `manage.py ingest` in a process of its own on a PostgreSQL of the test's own
(`private_postgres`), which the test restarts while batches are being stored; what was stored is
then read straight from that database.
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


def stored(server: PrivatePostgres) -> int:
    try:
        with psycopg.connect(server.url(), connect_timeout=2) as connection:
            return connection.execute("SELECT count(*) FROM ingest_trajectory").fetchone()[0]  # type: ignore[index]
    except psycopg.OperationalError:
        return -1


def test_postgres_restarted_mid_ingestion_retries_the_batch_in_flight_and_stores_every_record_once_and_whole(
    private_postgres, tmp_path
):
    path = write_records(tmp_path / "records.jsonl")
    env = {**os.environ, "DATABASE_URL": private_postgres.url(), "INGEST_BATCH_SIZE": "200",
           "FLYWHEEL_VAR_DIR": str(tmp_path / "var")}  # fmt: skip
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        env.pop(name, None)  # suggestions' messages go to a broker folder of this test's own, not to shared Redis
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
    with psycopg.connect(private_postgres.url()) as connection:
        trajectories, distinct = connection.execute(
            "SELECT count(*), count(DISTINCT external_id) FROM ingest_trajectory"
        ).fetchone()  # type: ignore[misc]
        steps = connection.execute("SELECT count(*) FROM ingest_step").fetchone()[0]  # type: ignore[index]
        half_stored = connection.execute(
            "SELECT count(*) FROM ingest_trajectory t WHERE step_count <> 3"
            " OR (SELECT count(*) FROM ingest_step s WHERE s.trajectory_id = t.id) <> 3"
        ).fetchone()[0]  # type: ignore[index]
    assert (trajectories, distinct, steps, half_stored) == (RECORDS, RECORDS, RECORDS * STEPS, 0)
