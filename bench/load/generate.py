"""Fill a scratch PostgreSQL database with N trajectories for the load test, with COPY, in minutes.

    python -m bench.load.generate postgres://postgres:postgres@127.0.0.1:5432/flywheel_load \
        --trajectories 1000000 --workers 4 --out var/load/credentials.json

It refuses a database that holds anything it did not make (an empty one, or one it filled
before, which it wipes). It runs the app's migrations, then stores what the app would have
stored after ingesting, suggesting and triaging that traffic: agents with their catalogues,
trajectories and their steps (rows built by the app's own parser and COPY encoder, search text
and dedup keys as ingest writes them), a review row for each with the app's own suggestions,
reviews with buckets by 20 reviewers, end users' feedback, and review queues (by filter and by
hand). Secondary indexes are dropped during COPY and rebuilt after, foreign-key triggers are off
while it copies (the rows are consistent by construction), and everything is ANALYZEd.

It writes the load users' logins, an ingest token and the ids the locust file needs to `--out`.
Not covered: jobs, tasks, versions and scores (the load test does not browse them at scale).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import secrets
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
EXTERNAL = ROOT.parent / "shared" / "external"
MARKER = "bench_load_generated"
CHUNK = 10_000
REVIEWERS = 20
LONG_TRAJECTORIES = 20
LONG_STEPS = 400
DAYS = 90
AGENT_WEIGHTS = {"airline": 0.45, "function-caller": 0.30, "workplace": 0.25}
VERSIONS = 5
BULK_TABLES = (
    "ingest_trajectory", "ingest_step", "ingest_feedback", "triage_review", "triage_suggestion",
    "triage_bucketassignment", "triage_queueitem",
)  # fmt: skip


# --- the scratch database -----------------------------------------------------------------


def scratch_prepare(url: str) -> None:
    """Refuse a database holding anything this generator did not make; wipe one it made."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        if MARKER in tables:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
        elif tables:
            sys.exit(f"refused: {url.rsplit('@', 1)[-1]} holds {len(tables)} tables this generator did not make; "
                     "give it an empty scratch database (createdb NAME)")  # fmt: skip
        conn.execute(f"CREATE TABLE {MARKER} (made_at timestamptz NOT NULL DEFAULT now(), trajectories bigint)")


def django_setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")
    import django

    django.setup()


def secondary_indexes(cursor: Any) -> list[tuple[str, str]]:
    """(name, definition) of the bulk tables' indexes that back no constraint: dropped while COPY runs."""
    cursor.execute(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid WHERE c.relname = ANY(%s) "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
        [list(BULK_TABLES)],
    )
    return list(cursor.fetchall())


# --- the rows made once: agents, users, token, queues -------------------------------------


@dataclass
class Setup:
    agents: dict[str, str]  # name -> id
    reviewer_ids: list[int]
    ingest_user_id: int
    admin_id: int
    bucket_ids: dict[str, int]
    hand_queue_id: int
    credentials: dict[str, Any]


def _catalogues(variants: list[Any], declared: list[dict[str, Any]]) -> None:
    """Each agent's catalogue as ingest leaves it: declared schemas, else inferred from the calls."""
    from flywheel.core.services import tools_normalize
    from flywheel.ingest.catalogue import Observed, catalogues_update, observe_calls

    observed: dict[str, Observed] = {}
    for variant in variants:
        if variant.agent != "function-caller":
            observe_calls(variant.parsed, observed.setdefault(variant.agent, {}))
    catalogues_update(declared={"function-caller": tools_normalize(declared)}, observed=observed)


def setup_rows(variants: list[Any], declared: list[dict[str, Any]], password: str) -> Setup:
    from django.contrib.auth.hashers import make_password
    from django.contrib.auth.models import Group, User

    from flywheel.core.models import Agent
    from flywheel.core.roles import Role
    from flywheel.core.services import api_token_create
    from flywheel.triage.models import Bucket, Queue

    agents = {}
    for name in AGENT_WEIGHTS:
        agent = Agent.objects.create(name=name, description=f"load test agent {name}",
                                     tools_source=Agent.ToolsSource.INFERRED)  # fmt: skip
        agents[name] = agent
    _catalogues(variants, declared)
    hashed = make_password(password)  # one hash for all: PBKDF2 per user would cost seconds
    users = {Role.REVIEWER: [f"load-reviewer-{n:02d}" for n in range(1, REVIEWERS + 1)] + ["load-ingest"],
             Role.VIEWER: ["load-viewer"], Role.ADMIN: ["load-admin"]}  # fmt: skip
    made: dict[str, User] = {}
    for role, names in users.items():
        group = Group.objects.get(name=role.value)
        for name in names:
            user = User.objects.create(username=name, password=hashed)
            user.groups.add(group)
            made[name] = user
    for agent in agents.values():
        agent.members.add(*made.values())
    _, token = api_token_create(user=made["load-ingest"], name="load test", scopes=["ingest"])
    admin = made["load-admin"]
    queues = {
        "airline failures": {"agent": "airline", "outcome": "failure"},
        "unrecovered tool errors": {"suggested": "incomplete_execution"},
        "function-caller unreviewed": {"agent": "function-caller", "state": "unreviewed", "outcome": "failure"},
        "escalations (by hand)": {},
    }
    made_queues = {name: Queue.objects.create(name=name, filters=filters, created_by=admin)
                   for name, filters in queues.items()}  # fmt: skip
    made_queues["airline failures"].reviewers.add(*[made[n] for n in users[Role.REVIEWER][:REVIEWERS]])
    credentials = {
        "password": password,
        "reviewers": users[Role.REVIEWER][:REVIEWERS],
        "viewer": "load-viewer",
        "admin": "load-admin",
        "ingest_token": token,
        "queues": {name: queue.pk for name, queue in made_queues.items()},
        "agents": list(AGENT_WEIGHTS),
        "versions": {name: [f"{name}:v{n}" for n in range(1, VERSIONS + 1)] for name in AGENT_WEIGHTS},
        "tools": sorted({step.tool_name for v in variants for step in v.parsed.steps if step.tool_name})[:60],
    }
    return Setup(
        agents={name: str(agent.pk) for name, agent in agents.items()},
        reviewer_ids=[made[n].pk for n in users[Role.REVIEWER][:REVIEWERS]],
        ingest_user_id=made["load-ingest"].pk,
        admin_id=admin.pk,
        bucket_ids=dict(Bucket.objects.values_list("slug", "pk")),
        hand_queue_id=made_queues["escalations (by hand)"].pk,
        credentials=credentials,
    )


# --- a variant, encoded once --------------------------------------------------------------


@dataclass
class Encoded:
    agent: str
    outcome: str
    final_result: str
    search_tail: str  # the search text after the external id
    has_error: bool
    step_count: int
    step_lines: list[str]  # each step's COPY line after its trajectory id
    suggestions: list[tuple[int | None, str, str, int | None]]  # bucket id, rule, reason, step index
    tool_steps: list[int]
    task: str


def encode_variant(variant: Any, bucket_ids: dict[str, int], catalogue: list[Any], policy: Any) -> Encoded:
    """Rows of one conversation as ingest and the suggestion rules would store them."""
    from flywheel.core.db import copy_text
    from flywheel.ingest.models import Step
    from flywheel.ingest.services import _search_text, _step_rows
    from flywheel.triage.services import RESULT_TEXT_CHARS
    from flywheel.triage.suggestions import StepFacts, TraceFacts, suggest

    parsed = variant.parsed
    placeholder = uuid.UUID(int=0)
    lines = [copy_text(Step, [row]).rstrip("\n").split("\t", 1)[1] for row in _step_rows(parsed, placeholder)]
    facts = TraceFacts(parsed.outcome, [
        StepFacts(i, s.kind, s.tool_name, s.tool_arguments, s.tool_arguments_raw, s.tool_call_id, s.is_error,
                  s.text[:RESULT_TEXT_CHARS])
        for i, s in enumerate(parsed.steps)
    ], catalogue, policy)  # fmt: skip
    found = [(bucket_ids[s.bucket] if s.bucket else None, s.rule, s.reason, s.step_index) for s in suggest(facts)]
    parsed.external_id = ""
    return Encoded(
        agent=variant.agent, outcome=parsed.outcome, final_result=parsed.final_result,
        search_tail=_search_text(parsed), has_error=any(s.is_error for s in parsed.steps),
        step_count=len(parsed.steps), step_lines=lines, suggestions=found,
        tool_steps=[i for i, s in enumerate(parsed.steps) if s.kind == "tool_call"], task=variant.task,
    )  # fmt: skip


# --- the bulk rows ------------------------------------------------------------------------


@dataclass
class Plan:
    total: int
    start: datetime
    span_seconds: float
    setup: Setup
    encoded: dict[str, list[Encoded]]
    weights: dict[str, list[float]]
    seed: int


HUMAN_BUCKETS = ("wrong_tool", "bad_planning", "retrieval_failure")


def _trajectory_rows(plan: Plan, index: int, rng: random.Random, out: dict[str, list[Any]]) -> None:
    setup = plan.setup
    agent = rng.choices(list(AGENT_WEIGHTS), weights=list(AGENT_WEIGHTS.values()))[0]
    variant = rng.choices(plan.encoded[agent], weights=plan.weights[agent])[0]
    pk = uuid.UUID(int=rng.getrandbits(128), version=4)
    ingested = plan.start + timedelta(seconds=plan.span_seconds * index / plan.total)
    duration = rng.randint(800, 60_000)
    tokens_in, tokens_out = rng.randint(400, 9000), rng.randint(40, 900)
    # Newer versions serve the newer traffic: version v(k) mostly in the k-th fifth of the period.
    version_index = min(VERSIONS - 1, max(0, int(VERSIONS * index / plan.total) + rng.choice((-1, 0, 0, 0))))
    external_id = f"{agent}-{index:08d}"
    out["trajectory"].append({
        "id": pk, "agent_id": setup.agents[agent], "upload_id": None, "source": agent, "external_id": external_id,
        "content_hash": "", "model_version": f"{agent}:v{version_index + 1}", "outcome": variant.outcome,
        "final_result": variant.final_result, "started_at": ingested - timedelta(milliseconds=duration),
        "duration_ms": duration, "input_tokens": tokens_in, "output_tokens": tokens_out,
        "cost": round(tokens_in * 2.5e-6 + tokens_out * 1e-5, 6), "metadata": {"task": variant.task},
        "step_count": variant.step_count, "has_error": variant.has_error,
        "search_text": f"{external_id}\n{variant.search_tail}"[:20_000] if variant.search_tail else external_id,
        "ingested_at": ingested,
    })  # fmt: skip
    out["steps"].extend(f"{pk}\t{line}" for line in variant.step_lines)
    _triage_rows(plan, pk, variant, ingested, rng, out)


def _triage_rows(plan: Plan, pk: uuid.UUID, variant: Encoded, ingested: datetime, rng: random.Random,
                 out: dict[str, list[Any]]) -> None:  # fmt: skip
    """The review row, suggestions, reviewers' buckets, feedback and hand-picked queue items of one trajectory."""
    setup = plan.setup
    suggested_at = ingested + timedelta(seconds=rng.uniform(0.5, 5))
    for bucket_id, rule, reason, step in variant.suggestions:
        out["suggestion"].append({"trajectory_id": pk, "bucket_id": bucket_id, "rule": rule, "reason": reason,
                                  "step_index": step, "created_at": suggested_at})  # fmt: skip
    failed = variant.outcome == "failure"
    draw = rng.random()
    state = ("reviewed" if draw < (0.35 if failed else 0.02)
             else "skipped" if draw < (0.38 if failed else 0.021) else "unreviewed")  # fmt: skip
    reviewer = rng.choice(setup.reviewer_ids) if state != "unreviewed" else None
    reviewed_at = suggested_at + timedelta(hours=rng.uniform(1, 72)) if reviewer else None
    out["review"].append({
        "trajectory_id": pk, "state": state, "reviewer_id": reviewer, "reviewed_at": reviewed_at,
        "note": "confirmed with the transcript" if state == "reviewed" and rng.random() < 0.2 else "",
        "claimed_by_id": None, "claimed_until": None, "suggested_at": suggested_at,
        "created_at": suggested_at, "updated_at": reviewed_at or suggested_at,
    })  # fmt: skip
    if state == "reviewed" and failed:
        _assignments(plan, pk, variant, reviewer, reviewed_at, rng, out)
    if rng.random() < 0.04:
        down = rng.random() < (0.7 if failed else 0.15)
        scored = rng.random() < 0.15
        out["feedback"].append({
            "trajectory_id": pk, "thumb": "" if scored else ("down" if down else "up"),
            "score": (0.2 if down else 0.9) if scored else None, "comment": "not what I asked" if down else "",
            "end_user": f"user-{rng.randint(1, 50_000)}", "sent_by_id": setup.ingest_user_id,
            "created_at": ingested + timedelta(minutes=rng.uniform(1, 600)),
            "updated_at": ingested + timedelta(minutes=600),
        })  # fmt: skip
    if failed and rng.random() < 0.01:
        out["queueitem"].append({
            "queue_id": setup.hand_queue_id, "trajectory_id": pk, "source": "hand", "rule": "",
            "added_by_id": setup.admin_id, "added_at": suggested_at + timedelta(hours=1),
            "removed_at": None, "removed_by_id": None,
        })  # fmt: skip


def _assignments(plan: Plan, pk: uuid.UUID, variant: Encoded, reviewer: int | None, at: datetime | None,
                 rng: random.Random, out: dict[str, list[Any]]) -> None:  # fmt: skip
    """A reviewer's buckets: a suggestion accepted (most often), else their own judgement; sometimes both."""
    accepted = next(((b, rule, step) for b, rule, _, step in variant.suggestions if b is not None), None)
    chosen: list[tuple[int, str, str, int | None]] = []
    if accepted and rng.random() < 0.8:
        chosen.append((accepted[0], "suggestion", accepted[1], accepted[2]))
    if not chosen or rng.random() < 0.15:
        bucket = plan.setup.bucket_ids[rng.choice(HUMAN_BUCKETS)]
        step = rng.choice(variant.tool_steps) if variant.tool_steps else None
        if all(bucket != item[0] for item in chosen):
            chosen.append((bucket, "human", "", step))
    for bucket, source, rule, step in chosen:
        out["bucketassignment"].append({"trajectory_id": pk, "bucket_id": bucket, "step_index": step,
                                        "source": source, "rule": rule, "assigned_by_id": reviewer,
                                        "created_at": at})  # fmt: skip


def _copy(cursor: Any, model: Any, rows: list[dict[str, Any]]) -> None:
    from flywheel.core.db import _copy_plan, copy_text

    if rows:
        with cursor.copy(_copy_plan(model).sql) as copy:
            copy.write(copy_text(model, rows))


def _copy_steps(cursor: Any, lines: list[str]) -> None:
    from flywheel.core.db import _copy_plan
    from flywheel.ingest.models import Step

    with cursor.copy(_copy_plan(Step).sql) as copy:
        for start in range(0, len(lines), 50_000):
            copy.write("\n".join(lines[start : start + 50_000]) + "\n")


def fill_range(plan: Plan, begin: int, end: int) -> int:
    """COPY trajectories [begin, end) and everything that hangs off them, a chunk per transaction."""
    from django.db import connection

    rng = random.Random(plan.seed * 1_000_003 + begin)
    for chunk_start in range(begin, end, CHUNK):
        out = _empty_out()
        for index in range(chunk_start, min(end, chunk_start + CHUNK)):
            _trajectory_rows(plan, index, rng, out)
        _copy_out(out)
    connection.close()
    return end - begin


def _empty_out() -> dict[str, list[Any]]:
    return {name: [] for name in ("trajectory", "steps", "review", "suggestion", "bucketassignment", "feedback",
                                  "queueitem")}  # fmt: skip


def _copy_out(out: dict[str, list[Any]]) -> None:
    """One chunk's rows, parents first, in one transaction."""
    from django.db import connection, transaction

    from flywheel.ingest.models import Feedback, Trajectory
    from flywheel.triage.models import BucketAssignment, QueueItem, Review, Suggestion

    models = {"review": Review, "suggestion": Suggestion, "bucketassignment": BucketAssignment,
              "feedback": Feedback, "queueitem": QueueItem}  # fmt: skip
    with transaction.atomic(), connection.cursor() as wrapper:
        cursor = wrapper.cursor
        _replica_role(cursor)
        _copy(cursor, Trajectory, out["trajectory"])
        _copy_steps(cursor, out["steps"])
        for name, model in models.items():
            _copy(cursor, model, out[name])


def _replica_role(cursor: Any) -> None:
    """Foreign-key triggers off for this transaction (superusers only); else they are checked, only slower."""
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    if cursor.fetchone()[0]:
        cursor.execute("SET LOCAL session_replication_role = replica")


_PLAN: Plan | None = None


def _worker(bounds: tuple[int, int]) -> int:
    assert _PLAN is not None
    return fill_range(_PLAN, *bounds)


def long_trajectories(plan: Plan, encoded_long: Encoded, count: int) -> list[str]:
    """A few long airline chats (LONG_STEPS steps), the newest traffic, for the trace viewer."""
    rng = random.Random(f"long-{plan.seed}")  # a stream apart from the workers'
    now = plan.start + timedelta(seconds=plan.span_seconds)
    out = _empty_out()
    # Every agent draw gives the long chat; the row is then made the airline's.
    single = Plan(
        1,
        now,
        0,
        plan.setup,
        {name: [encoded_long] for name in AGENT_WEIGHTS},
        {name: [1.0] for name in AGENT_WEIGHTS},
        plan.seed,
    )
    ids = []
    for number in range(count):
        _trajectory_rows(single, 0, rng, out)
        row = out["trajectory"][-1]
        row["external_id"] = f"airline-long-{number:03d}"
        row["agent_id"], row["model_version"] = plan.setup.agents["airline"], f"airline:v{VERSIONS}"
        row["search_text"] = f"{row['external_id']}\n{encoded_long.search_tail}"[:20_000]
        ids.append(str(row["id"]))
    _copy_out(out)
    return ids


def encode_all(setup: Setup, variants: list[Any]) -> tuple[dict[str, list[Encoded]], dict[str, list[float]]]:
    from flywheel.core.models import Agent
    from trainer.verifiers.safety import SafetyPolicy

    catalogues = dict(Agent.objects.values_list("name", "tools"))
    encoded: dict[str, list[Encoded]] = {name: [] for name in AGENT_WEIGHTS}
    weights: dict[str, list[float]] = {name: [] for name in AGENT_WEIGHTS}
    for variant in variants:
        encoded[variant.agent].append(encode_variant(variant, setup.bucket_ids, catalogues[variant.agent],
                                                     SafetyPolicy.default()))  # fmt: skip
        weights[variant.agent].append(variant.weight)
    return encoded, weights


def suggestions_check(sample: int = 300) -> int:
    """How many of a random sample's stored suggestions differ from what the app's rules find on its stored rows."""
    from flywheel.ingest.models import Trajectory
    from flywheel.triage.models import Suggestion
    from flywheel.triage.services import trace_facts
    from flywheel.triage.suggestions import suggest

    ids = list(Trajectory.objects.order_by("?").values_list("pk", flat=True)[:sample])
    stored: dict[Any, list[tuple[str, str, str, int | None]]] = {pk: [] for pk in ids}
    for row in Suggestion.objects.filter(trajectory_id__in=ids).values_list(
        "trajectory_id", "bucket__slug", "rule", "reason", "step_index"
    ):
        stored[row[0]].append((row[1] or "", *row[2:]))
    facts = trace_facts(ids)
    found = {pk: [(s.bucket or "", s.rule, s.reason, s.step_index) for s in suggest(facts[pk])] for pk in ids}
    return sum(sorted(found[pk]) != sorted(stored[pk]) for pk in ids)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a scratch PostgreSQL database, empty or filled by this generator")
    parser.add_argument("--trajectories", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "load" / "credentials.json")
    args = parser.parse_args(argv)
    started = time.monotonic()
    scratch_prepare(args.url)
    django_setup(args.url)
    from django.core.management import call_command
    from django.db import connection, connections

    from bench.load import corpus
    from flywheel.core.models import Agent
    from trainer.verifiers.safety import SafetyPolicy

    call_command("migrate", verbosity=0)
    migrated = time.monotonic()
    airline = corpus.airline_variants(EXTERNAL)
    callers, declared = corpus.function_caller_variants(EXTERNAL)
    variants = airline + callers + corpus.workplace_variants(EXTERNAL)
    setup = setup_rows(variants, declared, secrets.token_urlsafe(12))
    encoded, weights = encode_all(setup, variants)
    rng = random.Random(args.seed)
    long_parsed = corpus.long_variant(variants, LONG_STEPS, rng)
    airline_tools = Agent.objects.get(name="airline").tools
    long_encoded = encode_variant(
        corpus.Variant("airline", long_parsed, 1, "long-chat"), setup.bucket_ids, airline_tools, SafetyPolicy.default()
    )
    now = datetime.now().astimezone()
    span = DAYS * 86400.0
    plan = Plan(args.trajectories, now - timedelta(seconds=span + 3600), span, setup, encoded, weights, args.seed)
    with connection.cursor() as wrapper:
        dropped = secondary_indexes(wrapper.cursor)
        for name, _ in dropped:
            wrapper.cursor.execute(f"DROP INDEX {name}")
    connections.close_all()
    prepared = time.monotonic()
    workers = max(1, min(args.workers, args.trajectories // CHUNK or 1))
    step = -(-args.trajectories // workers)
    bounds = [(begin, min(args.trajectories, begin + step)) for begin in range(0, args.trajectories, step)]
    global _PLAN
    _PLAN = plan
    if workers == 1:
        stored = sum(fill_range(plan, *b) for b in bounds)
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            stored = sum(pool.map(_worker, bounds))
    long_ids = long_trajectories(plan, long_encoded, LONG_TRAJECTORIES)
    copied = time.monotonic()
    with connection.cursor() as wrapper:
        wrapper.cursor.execute("SET maintenance_work_mem = '512MB'")
        for _, definition in dropped:
            wrapper.cursor.execute(definition)
        indexed = time.monotonic()
        wrapper.cursor.execute("VACUUM ANALYZE")
        wrapper.cursor.execute(f"UPDATE {MARKER} SET trajectories = %s", [stored + len(long_ids)])
        wrapper.cursor.execute("SELECT pg_database_size(current_database())")
        size = wrapper.cursor.fetchone()[0]
    finished = time.monotonic()
    mismatches = suggestions_check()
    credentials = {**setup.credentials, "long_trajectories": long_ids}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(credentials, indent=2))
    args.out.chmod(0o600)
    print(json.dumps({
        "trajectories": stored + len(long_ids), "variants": len(variants), "workers": workers,
        "seconds": {"migrate": round(migrated - started, 1), "prepare": round(prepared - migrated, 1),
                    "copy": round(copied - prepared, 1), "indexes": round(indexed - copied, 1),
                    "analyze": round(finished - indexed, 1), "total": round(finished - started, 1)},
        "trajectories_per_second_copy": round(stored / max(copied - prepared, 1e-9)),
        "database_bytes": size, "database_size": f"{size / 2**30:.2f} GiB",
        "suggestions_differing_from_the_apps_rules": f"{mismatches} of 300 sampled",
        "credentials": str(args.out),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
