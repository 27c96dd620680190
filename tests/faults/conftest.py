"""Fixtures of the fault tests: a PostgreSQL and a Redis of their own, which a test may stop and restart,
and a filesystem small enough to fill. Never the shared services the rest of the suite uses.

PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user (`runuser`),
in a folder that user owns. A tmpfs needs mount rights (root, as in CI).
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from flywheel.celery import app
from tests.conftest import database_url_for_workers
from trainer.spec.adapters import CONFIG_FILE, WEIGHTS_FILE, write_manifest

START_SECONDS = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def postgres_bin(name: str) -> str:
    """The newest installed PostgreSQL's `name` (Debian keeps them under /usr/lib/postgresql/<version>/bin)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda path: int(Path(path).parts[4]))
    path = found[-1] if found else shutil.which(name)
    if not path:
        pytest.fail(f"PostgreSQL's {name} is not installed (make services installs it)")
    return path


def as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class PrivatePostgres:
    """A PostgreSQL server of the test's own on a free port: `restart()` is the fault."""

    root: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "flywheel") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        command = [postgres_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                   "-t", str(START_SECONDS), "-o", options, *args]  # fmt: skip
        subprocess.run(as_postgres(command), check=True, capture_output=True)

    def init(self) -> None:
        subprocess.run(as_postgres([postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                                    "-E", "UTF8", "--no-sync"]), check=True, capture_output=True)  # fmt: skip

    def start(self) -> None:
        self._pg_ctl("start")

    def restart(self) -> None:
        """A fast restart, as an operator's or a failover's: sessions are cut, transactions rolled back."""
        self._pg_ctl("-m", "fast", "restart")

    def stop(self) -> None:
        self._pg_ctl("-m", "immediate", "stop")

    def psql(self, sql: str, database: str = "flywheel") -> str:
        result = subprocess.run([postgres_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                                 "-d", database, "-XtAq", "-v", "ON_ERROR_STOP=1", "-c", sql],
                                check=True, capture_output=True, text=True)  # fmt: skip
        return result.stdout.strip()


@pytest.fixture
def private_postgres(django_db_setup) -> Iterator[PrivatePostgres]:
    """A started server whose database `flywheel` has the schema of the test database (copied by pg_dump)."""
    root = Path(tempfile.mkdtemp(prefix="flywheel-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    server = PrivatePostgres(root)
    try:
        server.init()
        server.start()
        server.psql("CREATE DATABASE flywheel", database="postgres")
        schema = subprocess.run([postgres_bin("pg_dump"), "--schema-only", "--no-owner", "--no-privileges",
                                 "-d", database_url_for_workers()],
                                check=True, capture_output=True)  # fmt: skip
        subprocess.run([postgres_bin("psql"), "-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres",
                        "-d", "flywheel", "-Xq", "-v", "ON_ERROR_STOP=1"], input=schema.stdout,
                       check=True, capture_output=True)  # fmt: skip
        yield server
    finally:
        with suppress(subprocess.CalledProcessError):
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class PrivateRedis:
    """A Redis of the test's own on a free port, keeping nothing on disk: a restart loses every message."""

    root: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.2).ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                   "no", "--dir", str(self.root), "--logfile", str(self.root / "redis.log")]  # fmt: skip
        self.process = subprocess.Popen(command)
        wait_until(self.answers, START_SECONDS, "the private Redis starting")

    def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=START_SECONDS)
        self.process = None


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is not installed (make services installs it)")
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.process is not None:
        server.stop()


def _forget_celery_connections() -> None:
    # The app keeps its connection pool, producers and result store: drop its references, so the next
    # use connects to the URLs in the environment. The pools themselves stay in kombu's registry (keyed
    # by URL) for whoever uses that URL again: closing one there for good would break the shared broker's.
    app._pool = None
    app.amqp._producer_pool = None
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)


@pytest.fixture
def private_broker(private_redis, settings, monkeypatch) -> Iterator[dict[str, str]]:
    """This process (its messages and /healthz) and the workers it starts on the private Redis; the env to give them."""
    private = {"CELERY_BROKER_URL": private_redis.url, "CELERY_RESULT_BACKEND": private_redis.url}
    settings.CELERY_BROKER_URL = private_redis.url
    # Celery reads these two from the environment before its configuration.
    for name, value in private.items():
        monkeypatch.setenv(name, value)
    _forget_celery_connections()
    yield private
    if app._pool is not None:
        app._pool.force_close_all(close_pool=False)  # the private Redis's sockets; the pool may serve again
    monkeypatch.undo()
    _forget_celery_connections()


@pytest.fixture
def small_filesystem(tmp_path) -> Iterator[Callable[[int], Path]]:
    """small_filesystem(size) -> a folder on a tmpfs of `size` bytes: a disk that really fills up."""
    mounts: list[Path] = []

    def mount(size: int) -> Path:
        point = tmp_path / f"small-disk-{len(mounts)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode:
            pytest.fail(f"a small tmpfs is needed to fill a disk, and mounting one failed: {done.stderr.strip()}")
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", "-l", str(point)], check=False)


def adapter(folder: Path, weights_bytes: int, seed: int) -> Path:
    """An adapter folder as the registry checks it: config, weights and a manifest with their hashes."""
    folder.mkdir(parents=True)
    (folder / CONFIG_FILE).write_text(json.dumps({"peft_type": "LORA", "r": 4, "seed": seed}))
    (folder / WEIGHTS_FILE).write_bytes(random.Random(seed).randbytes(weights_bytes))
    write_manifest(folder, base_model="tiny")
    return folder
