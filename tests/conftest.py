"""Fixtures shared by the whole suite: users per role, and a real Celery worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import override_settings

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.core.services import all_agents_grant, roles_sync

REPO_ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "correct-horse-battery-staple"
ALL_AGENTS = "all"
TAU_BENCH = REPO_ROOT.parent / "shared" / "external" / "tau_bench" / "gpt-4o-airline.json"


@pytest.fixture
def tau_bench_path() -> Path:
    """The real tau-bench airline trajectories (200 GPT-4o runs, 116 failures) from ../shared/external."""
    if not TAU_BENCH.exists():
        pytest.fail(f"{TAU_BENCH} is missing: the suite reads ../shared/external")
    return TAU_BENCH


@pytest.fixture
def led_pages(monkeypatch) -> list[bool]:
    """Per list page asked from here on, whether a leading filter's rows filled it (False: the list
    was walked instead; `flywheel.ingest.selectors._led_page`)."""
    from flywheel.ingest import selectors

    led: list[bool] = []
    lead_page = selectors._led_page

    def recorded(*args, **kwargs):
        page = lead_page(*args, **kwargs)
        led.append(page is not None)
        return page

    monkeypatch.setattr(selectors, "_led_page", recorded)
    return led


@pytest.fixture(scope="session", autouse=True)
def media_root(tmp_path_factory) -> Iterator[Path]:
    """Uploaded files go to a temporary folder, shared with worker subprocesses through MEDIA_ROOT."""
    root = tmp_path_factory.mktemp("media")
    with override_settings(MEDIA_ROOT=str(root)):
        yield root


@pytest.fixture
def make_user(django_user_model) -> Callable[..., object]:
    """make_user(role) -> a user in that role's group; make_user(None) has no role at all.

    `agents`: ALL_AGENTS (the default: the all-agents grant, as the upgrade migration gives every
    existing user) or the agents the user is a member of; tests of per-agent access name them.
    """

    # Transactional tests flush the tables, taking the migration's role groups with them.
    roles_sync()

    def make(role: Role | None, username: str | None = None, agents: Iterable[Agent] | str = ALL_AGENTS):
        name = username or f"{role.value if role else 'norole'}-{uuid.uuid4().hex[:6]}"
        user = django_user_model.objects.create_user(username=name, password=PASSWORD)
        if role is not None:
            user.groups.add(Group.objects.get(name=role.value))
        if agents == ALL_AGENTS:
            all_agents_grant(user=user)
        else:
            user.member_agents.add(*agents)
        return user

    return make


def database_url_for_workers() -> str:
    """A DATABASE_URL pointing a subprocess at the test database pytest-django created."""
    db = settings.DATABASES["default"]
    if "postgresql" not in db["ENGINE"]:
        raise RuntimeError("worker tests share the test database and need PostgreSQL (set DATABASE_URL)")
    credentials = quote(db["USER"] or "")
    if db.get("PASSWORD"):
        credentials += ":" + quote(db["PASSWORD"])
    return f"postgres://{credentials}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def celery_worker_process(django_db_setup, tmp_path) -> Iterator[Callable[..., subprocess.Popen]]:
    """start(queues) runs `celery worker` as a real subprocess on the test database; stopped after the test."""
    workers: list[subprocess.Popen] = []

    def start(queues: str = "default,gpu", env: dict[str, str] | None = None, pool: str = "solo") -> subprocess.Popen:
        """`pool`: solo (the task runs in the worker's own process), or prefork (one child, as production runs)."""
        env = {
            **os.environ,
            "DATABASE_URL": database_url_for_workers(),
            "MEDIA_ROOT": str(settings.MEDIA_ROOT),
            "JOB_RUNS_DIR": str(tmp_path / "runs"),
            **(env or {}),
        }
        log = (tmp_path / f"worker-{len(workers)}.log").open("w")
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "flywheel",
            "worker",
            "-Q",
            queues,
            "--pool",
            pool,
            "--concurrency",
            "1",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "INFO",
            "-n",
            f"test-{uuid.uuid4().hex[:8]}@%h",
        ]
        worker = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        workers.append(worker)
        return worker

    yield start
    for number, worker in enumerate(workers):
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        # Shown by pytest when the test failed: what the worker did.
        print(f"--- worker {number} log ---\n" + (tmp_path / f"worker-{number}.log").read_text()[-5000:])
