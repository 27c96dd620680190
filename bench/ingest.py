"""Ingestion throughput and memory against raw COPY, measured in one run (prints, asserts nothing).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/ingest.py [--count 100000]
        [--database flywheel_bench]

1. Generates COUNT OpenAI-chat trajectories of about 10 steps each into a JSONL file.
2. Ingests them through the ingestion service into a fresh PostgreSQL database (a child process,
   so its peak RSS is its own); also ingests the first 10,000 alone, in another child, for memory.
3. Copies the very rows that were stored into identical scratch tables (same columns, indexes and
   constraints) with psycopg's COPY: once as Python rows through `write_row` (the reference), and
   once as pre-encoded COPY text (the server's floor, for context).
Prints trajectories per second, the ratios (target >= 0.5 of psycopg's COPY), and the two peak RSS
figures (target: within 50 MB of each other).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

REPO = Path(__file__).resolve().parent.parent
BENCH_DB = "flywheel_bench"  # the scratch database's default name; --database picks another


def generate(path: Path, count: int) -> None:
    with path.open("w") as out:
        for n in range(count):
            messages = [{"role": "system", "content": "You are the support agent of Example Shop."}]
            for turn in range(3):
                call_id = f"call_{n}_{turn}"
                messages += [
                    {"role": "user", "content": f"Where is order {n}-{turn}? My email is user{n}@example.com"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": "get_order", "arguments": json.dumps({"order_id": f"{n}-{turn}"})},
                            }
                        ],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": json.dumps({"status": "shipped", "eta": "2d"}),
                    },
                ]
            messages.append({"role": "assistant", "content": "It ships in two days."})
            out.write(json.dumps({"id": n, "outcome": n % 3 != 0, "messages": messages}) + "\n")


def admin_url(database_url: str, name: str) -> str:
    return database_url.rsplit("/", 1)[0] + "/" + name


def fresh_database(database_url: str, name: str) -> str:
    with psycopg.connect(admin_url(database_url, "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    url = admin_url(database_url, name)
    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=env, check=True)
    return url


def child_ingest(path: str, database_url: str) -> None:
    """Runs in its own process: ingest the file, print seconds and peak RSS as JSON."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from flywheel.ingest.services import IngestOptions, stream_ingest

    started = time.perf_counter()
    with open(path, "rb") as stream:
        report = stream_ingest(stream=stream, options=IngestOptions(format="openai-chat", agent="bench"))
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "stored": report.stored, "peak_mb": peak_mb}))


def run_child(path: Path, database_url: str) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(path), database_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def copy_references(database_url: str) -> tuple[float, float]:
    """Seconds to COPY the stored rows into identical scratch tables, two ways.

    (psycopg rows) the rows as Python values through `copy.write_row`, timing only the writes;
    (pre-encoded) the rows already in COPY's text format, the server's floor.
    """
    with psycopg.connect(database_url) as reader, psycopg.connect(database_url) as writer:
        for table in TABLES:
            writer.execute(f"CREATE TABLE rows_{table} (LIKE {table} INCLUDING ALL)")
            writer.execute(f"CREATE TABLE text_{table} (LIKE {table} INCLUDING ALL)")
        writer.commit()
        rows_seconds = sum(_copy_rows(reader, writer, table) for table in TABLES)
        text_seconds = sum(_copy_text(reader, writer, table) for table in TABLES)
    return rows_seconds, text_seconds


TABLES = ("ingest_trajectory", "ingest_step")


def _stored_columns(conn: psycopg.Connection, table: str) -> str:
    """The table's columns that COPY can write: not the generated ones (PostgreSQL computes the
    search text's word vector itself, in the scratch tables as in the stored one)."""
    names = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s AND is_generated = 'NEVER' "
        "ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return ", ".join(f'"{name}"' for (name,) in names)


def _copy_rows(reader: psycopg.Connection, writer: psycopg.Connection, table: str) -> float:
    seconds = 0.0
    columns = _stored_columns(reader, table)
    with (
        reader.cursor(name=f"read_{table}") as source,
        writer.cursor().copy(f"COPY rows_{table} ({columns}) FROM STDIN") as copy,
    ):
        source.execute(f"SELECT {columns} FROM {table}")
        while batch := source.fetchmany(5000):
            started = time.perf_counter()
            for row in batch:
                copy.write_row([Jsonb(value) if isinstance(value, dict | list) else value for value in row])
            seconds += time.perf_counter() - started
        started = time.perf_counter()
    writer.commit()
    return seconds + time.perf_counter() - started


def _copy_text(reader: psycopg.Connection, writer: psycopg.Connection, table: str) -> float:
    columns = _stored_columns(reader, table)
    with tempfile.TemporaryFile() as dump:
        with reader.cursor().copy(f"COPY {table} ({columns}) TO STDOUT") as copy:
            for block in copy:
                dump.write(block)
        dump.seek(0)
        started = time.perf_counter()
        with writer.cursor().copy(f"COPY text_{table} ({columns}) FROM STDIN") as copy:
            while block := dump.read(1 << 20):
                copy.write(block)
        writer.commit()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000, help="the size of the memory comparison run")
    parser.add_argument("--database", default=BENCH_DB, help="the scratch database (dropped and recreated)")
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL", "")
    if not database_url.startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL server (the benchmark creates its own database there)")
    if not args.database.isidentifier():
        sys.exit("--database must be a plain identifier")
    with tempfile.TemporaryDirectory() as folder:
        big, small = Path(folder) / "big.jsonl", Path(folder) / "small.jsonl"
        generate(big, args.count)
        generate(small, args.small)
        small_run = run_child(small, fresh_database(database_url, args.database))
        url = fresh_database(database_url, args.database)
        big_run = run_child(big, url)
        rows_seconds, text_seconds = copy_references(url)
    count = big_run["stored"]
    ours, rows, text = count / big_run["seconds"], count / rows_seconds, count / text_seconds
    growth = big_run["peak_mb"] - small_run["peak_mb"]
    print(f"trajectories                       {count} (11 steps each)")
    print(f"ingestion service                  {ours:8.0f} trajectories/s  ({big_run['seconds']:.1f} s)")
    print(f"psycopg COPY of the same rows      {rows:8.0f} trajectories/s  ({rows_seconds:.1f} s)")
    print(f"COPY of pre-encoded text (floor)   {text:8.0f} trajectories/s  ({text_seconds:.1f} s)")
    print(f"ratio ours / psycopg COPY          {ours / rows:8.2f}   (target >= 0.5)")
    print(f"ratio ours / pre-encoded COPY      {ours / text:8.2f}")
    print(f"peak RSS at {args.small:>7}                {small_run['peak_mb']:8.1f} MB")
    print(f"peak RSS at {args.count:>7}                {big_run['peak_mb']:8.1f} MB   ({growth:+.1f} MB, target < 50)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_ingest(sys.argv[2], sys.argv[3])
    else:
        main()
