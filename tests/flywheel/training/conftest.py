from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from flywheel.datasets.importers import read
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.training.models import Job
from tests.conftest import REPO_ROOT

TINY_TASKS = REPO_ROOT / "trainer" / "examples" / "tiny_tasks.jsonl"
TINY_MODEL = REPO_ROOT / "tests" / "fixtures" / "tiny-model"
SCRIPTED = json.dumps([sys.executable, str(REPO_ROOT / "tests" / "fixtures" / "scripted_trainer.py")])


@pytest.fixture
def tiny_snapshot():
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="heldout", agent=None, source_ref="tiny")
    return snapshot_create(actor=None, name="tiny", split="heldout")


@pytest.fixture
def tiny_train_snapshot():
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="train", agent=None, source_ref="tiny")
    return snapshot_create(actor=None, name="tiny-train", split="train")


def scripted_env() -> dict[str, str]:
    """Worker settings that run the scripted stand-in instead of trainer, with quick heartbeats."""
    command = ",".join(json.loads(SCRIPTED))
    return {"TRAINER_COMMAND": command, "JOB_HEARTBEAT_SECONDS": "1", "JOB_CANCEL_GRACE_SECONDS": "3",
            "SCRIPTED_STEP_SECONDS": "0.2"}


def wait_for(job: Job, states: tuple[str, ...], timeout: float = 120) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.state in states:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job still {job.state} after {timeout} s; log:\n{job.log_tail}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose: /proc says so.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def pids_of(job: Job) -> dict[str, int]:
    path = Path(job.run_dir) / "pids.json"
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
        job.refresh_from_db()
        path = Path(job.run_dir) / "pids.json" if job.run_dir else path
    return json.loads(path.read_text())
