"""Run the load test: the app under gunicorn on a generated database, 20 locust users, figures out.

    python -m bench.load.run postgres://postgres:postgres@127.0.0.1:5432/flywheel_load \
        --broker redis://127.0.0.1:6379/15 --run-time 3m

It refuses a database `generate.py` did not fill. It starts gunicorn (as production does, bound
to 127.0.0.1) and one Celery worker on the `default` queue with beat (the suggestions and queue
rules that follow ingestion run there, and beat's recount of the count summaries every
SUMMARY_REFRESH_SECONDS, as in production), waits for `/healthz`, runs locust headless
for `--run-time` (CSV under `--out`), stops everything and prints p50/p95/p99 per page, the
error rate, ingest throughput while the users browsed, the database's size before and after,
and, where PostgreSQL loads `pg_stat_statements` (`shared_preload_libraries`), the statements
that took most of its time during the run. The ingest API's rate limit is raised for the run (one
token posts every batch).

Not covered: a remote app (127.0.0.1 only), TLS, several web hosts.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import psutil
import psycopg

from bench.load.generate import MARKER, ROOT

BIN = Path(sys.executable).parent
PAGES_WITH_TARGET = ("triage list", "trajectory list", "review page", "trace viewer")
TARGET_P95_MS = 150


def _refuse_unless_generated(url: str) -> int:
    with psycopg.connect(url) as conn:
        tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        if MARKER not in tables:
            sys.exit("refused: this database was not filled by bench/load/generate.py")
        return _size(conn)


def _size(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


def _statements_reset(url: str) -> bool:
    """Start counting statements afresh; False where PostgreSQL was not started with pg_stat_statements."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW shared_preload_libraries").fetchone()
        if row is None or "pg_stat_statements" not in row[0]:
            return False
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
        return True


def _statements_report(url: str, count: int = 12) -> str:
    """The `count` statements with the most execution time since the reset, with their share of all."""
    this_database = "dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    with psycopg.connect(url) as conn:
        summed = conn.execute(f"SELECT sum(total_exec_time) FROM pg_stat_statements WHERE {this_database}").fetchone()
        total = float(summed[0] or 0) if summed else 0.0
        rows = conn.execute(
            f"SELECT total_exec_time, calls, query FROM pg_stat_statements WHERE {this_database} "
            "ORDER BY total_exec_time DESC LIMIT %s",
            [count],
        ).fetchall()
    lines = [f"PostgreSQL execution time: {total / 1000:.0f} s in all; the statements that took most:"]
    for spent, calls, query in rows:
        text = " ".join(query.split())
        lines.append(f"  {spent / 1000:7.1f} s {100 * spent / max(total, 1e-9):5.1f}% {calls:>7} calls "
                     f"{spent / max(calls, 1):8.1f} ms each  {text[:160]}")  # fmt: skip
    return "\n".join(lines)


def _app_env(url: str, broker: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": url,
        "CELERY_BROKER_URL": broker,
        "CACHE_URL": broker,  # rate limits and lockout counted across processes, as in production
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(32),
        "ALLOWED_HOSTS": "127.0.0.1",
        "API_RATE_LIMIT_INGEST": "1000000",
        "LOG_LEVEL": "WARNING",
        # Production's persistent connections (DJANGO_ENV=production), which this run cannot set
        # whole: it would demand HTTPS. Without them each request forks a PostgreSQL backend.
        "CONN_MAX_AGE": "60",
    }


def _wait_healthy(base: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"the app at {base} did not answer /healthz within {seconds:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


class CpuShares(threading.Thread):
    """CPU seconds spent by each part of the run (the database, the web workers, the Celery worker and
    beat, locust, anything else), from every process's counters sampled each second: on a machine
    where all of them share the same cores, where the time goes says more than any page's latency."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seconds: Counter[str] = Counter()
        self._last: dict[int, float] = {}
        self._parts: dict[int, str] = {}  # a process's part, read from its command line once
        self._stopped = threading.Event()

    @staticmethod
    def _part(process: psutil.Process) -> str:
        command = " ".join(process.cmdline()[:4])
        for part in ("postgres", "gunicorn", "celery", "locust"):
            if part in process.name() or part in command:
                return part
        return "other"

    def _sample(self) -> None:
        for process in psutil.process_iter():
            try:
                times = process.cpu_times()
                used = times.user + times.system
                part = self._parts.get(process.pid) or self._parts.setdefault(process.pid, self._part(process))
            except psutil.Error:
                continue
            self.seconds[part] += used - self._last.get(process.pid, used)
            self._last[process.pid] = used

    def run(self) -> None:
        while not self._stopped.wait(1.0):
            self._sample()

    def stop(self) -> None:
        self._stopped.set()
        self.join()
        self._sample()


def _figures(stats_csv: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    with stats_csv.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    total = next(row for row in rows if row["Name"] == "Aggregated")
    return [row for row in rows if row["Name"] != "Aggregated"], total


def _report(
    rows: list[dict[str, str]],
    total: dict[str, str],
    ingest: dict[str, float],
    sizes: tuple[int, int],
    cpu: Counter[str],
) -> str:
    lines = [f"{'page':<34} {'requests':>8} {'errors':>6} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7}"]
    for row in sorted(rows, key=lambda row: row["Name"]):
        over = any(row["Name"].startswith(page) for page in PAGES_WITH_TARGET) and float(row["95%"]) > TARGET_P95_MS
        lines.append(
            f"{row['Name']:<34} {row['Request Count']:>8} {row['Failure Count']:>6} {row['50%']:>7} "
            f"{row['95%']:>7} {row['99%']:>7}{'  > target' if over else ''}"
        )
    requests, failures = int(total["Request Count"]), int(total["Failure Count"])
    seconds = max(ingest.get("stopped", 0) - ingest.get("started", 0), 1e-9)
    lines += [
        f"{'all':<34} {requests:>8} {failures:>6} {total['50%']:>7} {total['95%']:>7} {total['99%']:>7}",
        f"error rate: {100 * failures / max(requests, 1):.3f}% of {requests} requests",
        f"ingest while browsing: {ingest.get('stored', 0) / seconds:.0f} trajectories/s "
        f"({int(ingest.get('stored', 0))} stored of {int(ingest.get('posted', 0))} posted in {seconds:.0f} s)",
        f"database: {sizes[0] / 2**30:.2f} GiB before, {sizes[1] / 2**30:.2f} GiB after",
        f"CPU seconds over {seconds:.0f} s on {psutil.cpu_count()} cores: "
        + ", ".join(f"{part} {used:.0f}" for part, used in cpu.most_common()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a database bench/load/generate.py filled")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--credentials", type=Path, default=ROOT / "var" / "load" / "credentials.json")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "load")
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--spawn-rate", type=float, default=5)
    parser.add_argument("--run-time", default="3m")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--web-threads", type=int, default=2)
    parser.add_argument(
        "--only", choices=["Reviewer", "Agent"], help="one kind of user: the pages alone, or ingestion alone"
    )
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="no Celery worker nor beat: suggestions wait in the broker, summaries are recounted by the pages",
    )
    args = parser.parse_args(argv)
    before = _refuse_unless_generated(args.url)
    env = _app_env(args.url, args.broker)
    base = f"http://127.0.0.1:{args.port}"
    args.out.mkdir(parents=True, exist_ok=True)
    web = subprocess.Popen(
        [str(BIN / "gunicorn"), "flywheel.wsgi", "--bind", f"127.0.0.1:{args.port}",
         "--workers", str(args.web_workers), "--threads", str(args.web_threads), "--timeout", "120",
         "--keep-alive", "30"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    worker = None
    if not args.no_worker:
        worker = subprocess.Popen(
            [str(BIN / "celery"), "-A", "flywheel", "worker", "-Q", "default", "--concurrency", "1",
             "--beat", "--schedule", str(args.out / "celerybeat-schedule"),
             "--loglevel", "WARNING", "-n", f"load-{os.getpid()}@%h"],
            cwd=ROOT, env=env,
        )  # fmt: skip
    ingest_out = args.out / "ingest.json"
    try:
        _wait_healthy(base)
        counting = _statements_reset(args.url)
        shares = CpuShares()
        shares.start()
        locust_env = {**env, "LOAD_CREDENTIALS": str(args.credentials), "LOAD_INGEST_OUT": str(ingest_out)}
        subprocess.run(
            [str(BIN / "locust"), "-f", str(Path(__file__).with_name("locustfile.py")), "--headless",
             "--users", str(args.users), "--spawn-rate", str(args.spawn_rate), "--run-time", args.run_time,
             "--host", base, "--csv", str(args.out / "load"), "--only-summary", "--stop-timeout", "10",
             *([args.only] if args.only else [])],
            cwd=ROOT, env=locust_env, check=False,
        )  # fmt: skip
        shares.stop()
    finally:
        _stop(web)
        if worker is not None:
            _stop(worker)
    with psycopg.connect(args.url) as conn:
        after = _size(conn)
    rows, total = _figures(args.out / "load_stats.csv")
    ingest = json.loads(ingest_out.read_text()) if ingest_out.exists() else {}
    print(_report(rows, total, ingest, (before, after), shares.seconds))
    print(
        _statements_report(args.url)
        if counting
        else "(start PostgreSQL with shared_preload_libraries = 'pg_stat_statements' to see where its time goes)"
    )


if __name__ == "__main__":
    main()
