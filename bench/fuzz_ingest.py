"""Fuzz every ingestion entry point with mutated real records, long; prints what ran and what escaped.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/fuzz_ingest.py \\
        [--examples 5000] [--database flywheel_fuzz] [--only upload,api-lines,api-envelope,otlp]

The same properties as tests/flywheel/ingest/test_properties.py (strategies and invariants live in
tests/flywheel/ingest/fuzzing.py), with a large, random budget instead of CI's small derandomized
one, and without stopping at the first failure: the properties run in a fresh database (dropped
and recreated first), and every broken invariant or escaped exception is counted and a few of
each kind are printed (the example and the traceback). Prints one JSON summary line per property and
a total last; exits 1 when anything escaped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FUZZ_DB = "flywheel_fuzz"
PROPERTIES = ("upload", "api-lines", "api-envelope", "otlp")
SHOWN = 3  # examples printed per distinct problem


def fresh_database(database_url: str, name: str) -> str:
    import subprocess

    import psycopg

    admin = database_url.rsplit("/", 1)[0]
    with psycopg.connect(f"{admin}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    url = f"{admin}/{name}"
    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=env, check=True)
    return url


def django_ready(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")
    os.environ.setdefault("API_RATE_LIMIT_INGEST", str(10**9))  # thousands of calls a minute: not a client to throttle
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's host, and exceptions raised rather than rendered


def reviewer_token() -> str:
    from django.contrib.auth.models import Group, User

    from flywheel.core.roles import Role
    from flywheel.core.services import all_agents_grant, api_token_create

    user = User.objects.create_user(username="fuzz-reviewer", password="fuzz-reviewer-password")
    user.groups.add(Group.objects.get(name=Role.REVIEWER.value))
    all_agents_grant(user=user)  # the fuzzed records name agents of their own
    return api_token_create(user=user, name="fuzz")[1]


def checks(token: str) -> dict[str, tuple[Any, Any]]:
    from django.test import Client

    from tests.flywheel.ingest import fuzzing

    client = Client()
    return {
        "upload": (fuzzing.hostile_files(), fuzzing.check_upload),
        "api-lines": (fuzzing.hostile_files(), lambda h: fuzzing.check_api(client, token, h, envelope=False)),
        "api-envelope": (
            fuzzing.hostile_files(containers=False, truncate=False),
            lambda h: fuzzing.check_api(client, token, h, envelope=True),
        ),
        "otlp": (fuzzing.hostile_exports(), lambda h: fuzzing.check_otlp(client, token, h)),
        "otlp-openinference": (fuzzing.hostile_exports(fuzzing.openinference_export),
                               lambda h: fuzzing.check_otlp(client, token, h)),  # fmt: skip
    }


def run(name: str, strategy: Any, check: Any, examples: int) -> dict[str, Any]:
    from tests.flywheel.ingest import fuzzing

    kinds: Counter[str] = Counter()

    def record(example: Any, problems: list[str]) -> None:
        for problem in problems:
            kind = problem.split(":", 1)[0][:120]
            kinds[kind] += 1
            if kinds[kind] <= SHOWN:
                print(f"[{name}] {problem[:500]}\n    in {example!r:.1500}", file=sys.stderr)

    def guarded(example: Any) -> list[str]:
        try:
            return check(example)
        except Exception as exc:  # an escape: what this command exists to count
            return [f"escaped {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"]

    ran = fuzzing.run_property(strategy, guarded, examples=examples, derandomize=False, on_problems=record)
    return {"property": name, "examples": ran, "problems": sum(kinds.values()), "kinds": dict(kinds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000, help="examples per property")
    parser.add_argument("--database", default=FUZZ_DB, help="the scratch database (dropped and recreated)")
    parser.add_argument("--only", default=",".join(PROPERTIES), help="comma-separated: " + ", ".join(PROPERTIES))
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL", "")
    if not database_url.startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL server (the fuzzer creates its own database there)")
    if not args.database.isidentifier():
        sys.exit("--database must be a plain identifier")
    chosen = [name for name in args.only.split(",") if name]
    if unknown := set(chosen) - set(PROPERTIES):
        sys.exit(f"unknown property {', '.join(sorted(unknown))}")
    django_ready(fresh_database(database_url, args.database))
    token = reviewer_token()
    summaries = []
    for name, (strategy, check) in checks(token).items():
        if name in chosen:
            summaries.append(run(name, strategy, check, args.examples))
            print(json.dumps(summaries[-1]), flush=True)
    total = {"examples": sum(s["examples"] for s in summaries), "problems": sum(s["problems"] for s in summaries)}
    print(json.dumps({"total": total}))
    sys.exit(1 if total["problems"] else 0)


if __name__ == "__main__":
    main()
