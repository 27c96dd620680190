"""Where each page's time goes on a generated database: its queries, their time, the slowest one's plan.

    python -m bench.load.explain postgres://postgres:postgres@127.0.0.1:5432/flywheel_load [--plans]
        [--text WORD ...] [--tool NAME ...] [--repeat 3] [--profile 15]

Renders the load test's pages in-process (Django's test client, signed in as a load reviewer, a
member of every agent like most users) against a database `generate.py` filled, and prints per
page: the queries it ran, their total time, the wall time of the whole render, and with `--plans`
the slowest query's EXPLAIN (ANALYZE, BUFFERS), with `--profile N` the N functions that took most
of the last render's own time (cProfile: where the wall time beyond the SQL goes). `--text` adds
the trajectory and triage lists searched for that text, `--tool` those filtered by that tool;
`--repeat` renders each page that many times and prints the median.
Quieter than the locust run on a busy machine: no HTTP, no concurrency, the same SQL.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time
from datetime import date, timedelta
from pathlib import Path
from statistics import median
from urllib.parse import urlencode

from bench.load.generate import ROOT, django_setup


def pages(credentials: dict, texts: list[str], tools: list[str]) -> list[tuple[str, str]]:
    today = date.today()
    tool = "get_reservation_details"
    queue = credentials["queues"]["airline failures"]
    listed = [
        ("none", ""),
        ("outcome", "outcome=failure"),
        ("agent", "agent=airline"),
        ("model_version", "model_version=airline:v3"),
        ("tool", f"tool={tool}"),
        ("error", "error=true"),
        ("since", f"since={(today - timedelta(days=30)).isoformat()}"),
        ("until", f"until={(today - timedelta(days=60)).isoformat()}"),
        ("text", "q=baggage"),
        ("substring", urlencode({"q": '"gold member"'})),
        ("feedback", "feedback=down"),
    ]
    triage = [
        *listed,
        ("bucket", "bucket=wrong_tool"),
        ("suggested", "suggested=incomplete_execution"),
        ("state", "state=reviewed"),
        ("rare tool", "tool=send_certificate"),
        ("text in 1%", "q=nadia"),
        ("text in 0.4%", "q=triangle"),
    ]
    return [
        *[(f"trajectory list: {name}", f"/trajectories/?{query}") for name, query in listed],
        *[(f"triage list: {name}", f"/triage/trajectories/?{query}") for name, query in triage],
        *[(f"trajectory list: q={text}", f"/trajectories/?{urlencode({'q': text})}") for text in texts],
        *[(f"triage list: q={text}", f"/triage/trajectories/?{urlencode({'q': text})}") for text in texts],
        *[(f"trajectory list: tool={name}", f"/trajectories/?{urlencode({'tool': name})}") for name in tools],
        *[(f"triage list: tool={name}", f"/triage/trajectories/?{urlencode({'tool': name})}") for name in tools],
        ("trace viewer (long)", f"/trajectories/{credentials['long_trajectories'][0]}/"),
        ("review page (in a queue)", f"/triage/review/{credentials['long_trajectories'][1]}/?queue={queue}"),
        ("queue list", "/triage/"),
        ("queue detail", f"/triage/queues/{queue}/"),
        ("dashboards", "/dashboards/"),
        ("home", "/"),
        ("monitoring", "/monitoring/"),
        ("monitor: airline", "/monitoring/airline/"),
        ("agents", "/agents/"),
        ("models", "/models/"),
        ("models: airline", "/models/airline/"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--credentials", type=Path, default=ROOT / "var" / "load" / "credentials.json")
    parser.add_argument("--plans", action="store_true", help="EXPLAIN ANALYZE each page's slowest query")
    parser.add_argument("--only", default="", help="pages whose name contains this")
    parser.add_argument("--text", action="append", default=[], help="also the lists searched for this text")
    parser.add_argument("--tool", action="append", default=[], help="also the lists filtered by this tool")
    parser.add_argument("--repeat", type=int, default=1, help="renders per page; the median is printed")
    parser.add_argument("--profile", type=int, default=0, help="print the N functions with most own time")
    args = parser.parse_args()
    os.environ.setdefault("DEBUG", "false")
    django_setup(args.url)
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    credentials = json.loads(args.credentials.read_text())
    client = Client(HTTP_HOST="127.0.0.1")  # a host the default ALLOWED_HOSTS admits (not "testserver")
    client.force_login(User.objects.get(username=credentials["reviewers"][0]))
    for name, path in pages(credentials, args.text, args.tool):
        if args.only not in name:
            continue
        renders = []
        profile = cProfile.Profile()
        for attempt in range(args.repeat):
            profiled = args.profile and attempt == args.repeat - 1
            started = time.perf_counter()
            with CaptureQueriesContext(connection) as queries:
                if profiled:
                    profile.enable()
                status = client.get(path).status_code
                if profiled:
                    profile.disable()
            renders.append((1000 * (time.perf_counter() - started), list(queries.captured_queries)))
        wall = median(render[0] for render in renders)
        timed = sorted(renders[-1][1], key=lambda query: float(query["time"]), reverse=True)
        sql_ms = median(1000 * sum(float(query["time"]) for query in render[1]) for render in renders)
        print(
            f"{name:<34} {status} {len(timed):>3} queries {sql_ms:>8.1f} ms SQL {wall:>8.1f} ms wall"
            f"  slowest {1000 * float(timed[0]['time']) if timed else 0:.1f} ms"
        )
        if args.profile:
            print(_hot_functions(profile, args.profile))
        if args.plans and timed:
            with connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {timed[0]['sql']}")
                print("    " + timed[0]["sql"][:600])
                print("\n".join(f"    {row[0]}" for row in cursor.fetchall()))


def _hot_functions(profile: cProfile.Profile, count: int) -> str:
    """The `count` functions with the most own time in `profile`, indented under the page's line."""
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(count)
    table = out.getvalue().split("ncalls", 1)[-1]
    return "\n".join(f"    {line}" for line in ("ncalls" + table).rstrip().splitlines())


if __name__ == "__main__":
    main()
