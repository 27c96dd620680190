"""Every list and detail page reads in a number of queries that does not grow with its rows.

Each case renders a page over a few rows (3), counts its queries, adds many more (27), and
renders it again under `django_assert_max_num_queries` with the first count: a query per row
(an N+1) fails it. The rows are stored through the app's own services where they exist
(ingest, suggestions, reviews, feedback, queues, audit), and each page is checked to show the
rows added last, so a page that stopped listing them cannot pass. The viewer is a member of the
agent, not an all-agents user, so the per-agent filters run as they do for most users.

Pages of the URLconf not listed here hold no rows that grow (forms, actions, downloads), or are
covered in their app's tests (the home page: tests/flywheel/dashboards/test_views.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any
from uuid import uuid4

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.core.services import api_token_create, audit_record
from flywheel.dashboards.services import summaries_recount
from flywheel.datasets.models import RegressionTask, SnapshotItem, SourceKind, TaskRevision, TaskSetSnapshot
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import feedback_add
from flywheel.registry.models import Deployment, DeploymentAction, GateResult, GateStatus, LivePointer, ModelVersion
from flywheel.rewards.buckets import bucket_judging_launch, bucket_suggestions_store
from flywheel.training.models import Job, JobKind, JobState, MetricPoint, Sample
from flywheel.triage.models import Bucket, ReviewState
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.services import BucketChoice, queue_create, queue_items_add, review_submit
from tests.flywheel.triage.conftest import SHOP_TOOLS, built_in_buckets, call, result, store, user  # noqa: F401

pytestmark = pytest.mark.django_db
FEW, MANY = 3, 30


@dataclass
class World:
    """What the pages read: one agent, its member, and the rows each case adds."""

    agent: Agent
    viewer: User
    store: Callable[..., dict[str, Trajectory]]
    added: int = 0
    trajectories: list[Trajectory] = field(default_factory=list)
    objects: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def world(make_user, store, built_in_buckets, tmp_path) -> World:  # noqa: F811
    store(_record(0, steps=1))  # the agent, made by ingest with its declared catalogue
    agent = Agent.objects.get(name="shop")
    viewer = make_user(Role.REVIEWER, agents=[agent])
    viewer.groups.add(*Group.objects.filter(name__in=[Role.TRAINER.value, Role.APPROVER.value]))
    Trajectory.objects.all().delete()
    return World(agent, viewer, store, objects={"tmp": tmp_path})


def _record(number: int, *, steps: int = 2, outcome: str = "failure") -> dict[str, Any]:
    """A failed shop trajectory: `steps` lookups, the last of them an error the agent never recovers from."""
    body: list[dict[str, Any]] = [user(f"Where is order {number}? needle-{number}")]
    for index in range(steps):
        body.append(call("lookup_order", {"order_id": str(number)}, call_id=f"c{index}"))
        last = index == steps - 1
        body.append(result("lookup_order", "Error: timeout" if last else "found", error=last, call_id=f"c{index}"))
    return {
        "id": f"shop-{number}",
        "agent": "shop",
        "outcome": outcome,
        "tools": SHOP_TOOLS,
        "steps": body,
        "model_version": "shop:v1",
    }


def add_trajectories(world: World, count: int) -> None:
    """`count` more failed trajectories, each suggested for, reviewed with a bucket, and given a thumbs down."""
    first = world.added
    stored = world.store(*[_record(number) for number in range(first, first + count)])
    bucket = Bucket.objects.get(slug="incomplete_execution")
    for number in range(first, first + count):
        trajectory = stored[f"shop-{number}"]
        if number % 2:
            review_submit(actor=world.viewer, trajectory=trajectory, choices=[BucketChoice(bucket, 2)], note="seen")
        feedback_add(trajectory=trajectory, value="down", comment="wrong", end_user=f"u{number}", sent_by=world.viewer)
        world.trajectories.append(trajectory)
    world.added += count


@dataclass(frozen=True)
class Case:
    """A page, how its rows grow, and the text that shows the newest of them is on it."""

    name: str
    url: Callable[[World], str]
    grow: Callable[[World, int], None]
    newest: Callable[[World], str]


def _newest_trajectory(world: World) -> str:
    return world.trajectories[-1].external_id


def _list(path: str, **params: str) -> Callable[[World], str]:
    def url(world: World) -> str:
        query = "&".join(f"{key}={value}" for key, value in params.items())
        return f"{reverse(path)}?{query}" if query else reverse(path)

    return url


TODAY = date.today().isoformat()
TRAJECTORY_FILTERS = {
    "none": {},
    "outcome": {"outcome": "failure"},
    "agent": {"agent": "shop"},
    "model_version": {"model_version": "shop:v1"},
    "tool": {"tool": "lookup_order"},
    "error": {"error": "true"},
    "since": {"since": TODAY},
    "until": {"until": TODAY},
    "text": {"q": "needle"},
    "feedback": {"feedback": "down"},
}
TRIAGE_FILTERS = {
    **TRAJECTORY_FILTERS,
    "bucket": {"bucket": "incomplete_execution"},
    "suggested": {"suggested": "incomplete_execution"},
    "state": {"state": ReviewState.REVIEWED},
}


def _grow_steps(world: World, count: int) -> None:
    """One trajectory, stored again with `count` more lookups (a new id: steps are never edited in place)."""
    world.added += count
    world.trajectories[:] = [
        world.store(_record(10_000 + world.added, steps=world.added))[f"shop-{10_000 + world.added}"]
    ]


def _trajectory_page(path: str) -> Callable[[World], str]:
    return lambda world: reverse(path, kwargs={"trajectory_id": world.trajectories[-1].pk})


def _grow_queue(world: World, count: int) -> None:
    add_trajectories(world, count)
    queue = world.objects.get("queue")
    if queue is None:
        queue = world.objects["queue"] = queue_create(
            actor=world.viewer,
            name="shop failures",
            filters=TriageFilters.from_json({"agent": "shop", "outcome": "failure"}),
        )
    queue_items_add(actor=world.viewer, queue=queue, trajectory_ids=[t.pk for t in world.trajectories[-count:]])


def _grow_queues(world: World, count: int) -> None:
    add_trajectories(world, 1)
    start = len(world.objects.setdefault("queues", []))
    for number in range(start, start + count):
        world.objects["queues"].append(
            queue_create(
                actor=world.viewer, name=f"queue {number}", filters=TriageFilters.from_json({"outcome": "failure"})
            )
        )


def _task(world: World, number: int) -> RegressionTask:
    key = uuid4().hex
    source = world.trajectories[-1] if world.trajectories else None
    return RegressionTask.objects.create(
        agent=world.agent,
        external_id=f"task-{number}",
        split="train",
        source_kind=SourceKind.MANUAL,
        content={"messages": [{"role": "user", "content": f"task {number}"}]},
        content_hash=key,
        leakage_key=key,
        leakage_text=key,
        source_trajectory=source,
        bucket=Bucket.objects.get(slug="wrong_tool"),
    )


def _grow_tasks(world: World, count: int) -> None:
    if not world.trajectories:
        add_trajectories(world, 1)
    world.objects["tasks"] = [_task(world, world.added + n) for n in range(count)]
    world.added += count


def _grow_revisions(world: World, count: int) -> None:
    task = world.objects.get("task") or world.objects.setdefault("task", _task(world, 0))
    for number in range(world.added + 1, world.added + count + 1):
        TaskRevision.objects.create(
            task=task,
            number=number,
            content=task.content,
            split=task.split,
            author=world.viewer,
            note=f"revision note {number}",
        )
    world.added += count


def _snapshot(world: World, number: int) -> TaskSetSnapshot:
    return TaskSetSnapshot.objects.create(
        name=f"snapshot {number}",
        split="train",
        agent=world.agent,
        content_hash=uuid4().hex,
        task_count=0,
        created_by=world.viewer,
    )


def _grow_snapshots(world: World, count: int) -> None:
    for number in range(world.added, world.added + count):
        _snapshot(world, number)
    world.added += count


def _grow_snapshot_items(world: World, count: int) -> None:
    snapshot = world.objects.get("snapshot") or world.objects.setdefault("snapshot", _snapshot(world, 0))
    for number in range(world.added, world.added + count):
        task = _task(world, number)
        SnapshotItem.objects.create(
            snapshot=snapshot,
            task=task,
            position=number,
            content=task.content,
            content_hash=task.content_hash,
            bucket="wrong_tool",
        )
    world.added += count


def _job(world: World) -> Job:
    return Job.objects.create(
        kind=JobKind.SFT,
        state=JobState.SUCCEEDED,
        agent=world.agent,
        snapshot=_snapshot(world, 10_000 + Job.objects.count()),
        base_model="tiny",
        launched_by=world.viewer,
        finished_at=timezone.now(),
    )


def _grow_jobs(world: World, count: int) -> None:
    world.objects["jobs"] = [_job(world) for _ in range(count)]


def _grow_job_rows(world: World, count: int) -> None:
    job = world.objects.get("job") or world.objects.setdefault("job", _job(world))
    for step in range(world.added, world.added + count):
        MetricPoint.objects.create(job=job, attempt=1, step=step, name="train/loss", value=1.0 / (step + 1))
        Sample.objects.create(job=job, step=step, task_id=f"task-{step}", prompt="p", completion="c", reward=0.5)
    world.added += count


def _version(agent: Agent, number: int) -> ModelVersion:
    return ModelVersion.objects.create(
        agent=agent,
        number=number,
        base_model="tiny",
        adapter_sha256=uuid4().hex + uuid4().hex,
        config_sha256="c" * 64,
        storage_path=f"{agent.name}/v{number}",
    )


def _promote(version: ModelVersion, previous: ModelVersion | None) -> None:
    deployment = Deployment.objects.create(
        agent=version.agent,
        action=DeploymentAction.PROMOTE,
        from_version=previous,
        to_version=version,
        to_sha256=version.adapter_sha256,
        actor_name="approver",
        override=True,
    )
    LivePointer.objects.update_or_create(agent=version.agent, defaults={"version": version, "deployment": deployment})


def _grow_versions(world: World, count: int) -> None:
    """`count` more versions of the agent, each promoted over the one before (the history grows too)."""
    previous = ModelVersion.objects.filter(agent=world.agent).order_by("number").last()
    for number in range(world.added + 1, world.added + count + 1):
        version = _version(world.agent, number)
        version.parent = previous
        version.save()
        _promote(version, previous)
        previous = version
    world.added += count


def _grow_agents(world: World, count: int) -> None:
    """`count` more agents the viewer is a member of, each with a live version and a trajectory's worth of rows."""
    for number in range(world.added, world.added + count):
        agent = Agent.objects.create(name=f"agent-{number}")
        agent.members.add(world.viewer)
        _promote(_version(agent, 1), None)
    world.added += count


def _grow_gates(world: World, count: int) -> None:
    version = world.objects.get("version") or world.objects.setdefault("version", _version(world.agent, 1))
    for _ in range(count):
        job = Job.objects.create(
            kind=JobKind.GATE,
            state=JobState.SUCCEEDED,
            agent=world.agent,
            snapshot=_snapshot(world, 20_000 + Job.objects.count()),
            base_model="tiny",
        )
        GateResult.objects.create(
            job=job,
            candidate=version,
            policy={"metric": "correct_arguments"},
            report={"candidate": {"overall": {}}, "baseline": {"overall": {}}},
            status=GateStatus.FAILED,
            decision={"passed": False, "criteria": []},
        )


def _grow_judgings(world: World, count: int) -> None:
    """`count` more bucket judgings of the agent (a launch makes three), each wrong-tool one finished by a
    worker's results file that fails every item: a suggestion per trajectory awaiting review."""
    if not world.trajectories:
        add_trajectories(world, FEW)
    judgings = world.objects.setdefault("judgings", [])
    while len(judgings) < world.added + count:
        launched = bucket_judging_launch(actor=world.viewer, agent=world.agent)
        job = launched[0].job
        results = world.objects["tmp"] / f"judgements-{job.pk}.jsonl"
        results.write_text("".join(json.dumps({"id": case["id"], "score": 0.1, "passed": False, "reason": "no",
                                               "raw": "Score: 1"}) + "\n" for case in job.cases))  # fmt: skip
        Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, result={
            "results": str(results), "metrics": {"items": len(job.cases), "unreadable": 0}})  # fmt: skip
        job.refresh_from_db()
        bucket_suggestions_store(job=job)
        judgings += launched
    world.added += count


def _grow_audit(world: World, count: int) -> None:
    for number in range(world.added, world.added + count):
        audit_record(actor=world.viewer, action="load.test", target=world.agent, data={"number": number})
    world.added += count


def _grow_tokens(world: World, count: int) -> None:
    for number in range(world.added, world.added + count):
        api_token_create(user=world.viewer, name=f"token {number}", scopes=["ingest"])
    world.added += count


def _page(path: str, **kwargs: Callable[[World], Any]) -> Callable[[World], str]:
    return lambda world: reverse(path, kwargs={key: value(world) for key, value in kwargs.items()})


CASES = [
    *[
        Case(
            f"trajectory list: {name}", _list("ingest:trajectory_list", **params), add_trajectories, _newest_trajectory
        )
        for name, params in TRAJECTORY_FILTERS.items()
    ],
    *[
        Case(f"triage list: {name}", _list("triage:trajectory_list", **params), add_trajectories, _newest_trajectory)
        for name, params in TRIAGE_FILTERS.items()
    ],
    Case(
        "trace viewer",
        _trajectory_page("ingest:trajectory_detail"),
        _grow_steps,
        lambda world: f"Where is order {10_000 + world.added}",
    ),
    Case(
        "review page",
        _trajectory_page("triage:review"),
        _grow_steps,
        lambda world: f"Where is order {10_000 + world.added}",
    ),
    Case("queue list", _list("triage:queue"), _grow_queues, lambda world: world.objects["queues"][-1].name),
    Case(
        "queue detail",
        lambda world: reverse("triage:queue_detail", kwargs={"queue_id": world.objects["queue"].pk}),
        _grow_queue,
        _newest_trajectory,
    ),
    Case("dashboards", _list("dashboards:index"), add_trajectories, lambda world: "Incomplete execution"),
    Case("task list", _list("datasets:task_list"), _grow_tasks, lambda world: world.objects["tasks"][-1].external_id),
    Case(
        "task detail",
        _page("datasets:task_detail", task_id=lambda world: world.objects["task"].pk),
        _grow_revisions,
        lambda world: f"revision note {world.added}",
    ),
    Case(
        "snapshot list", _list("datasets:snapshot_list"), _grow_snapshots, lambda world: f"snapshot {world.added - 1}"
    ),
    Case(
        "snapshot detail",
        _page("datasets:snapshot_detail", snapshot_id=lambda world: world.objects["snapshot"].pk),
        _grow_snapshot_items,
        lambda world: f"task-{world.added - 1}",
    ),
    Case("job list", _list("training:job_list"), _grow_jobs, lambda world: str(world.objects["jobs"][-1])),
    Case(
        "job detail",
        _page("training:job_detail", job_id=lambda world: world.objects["job"].pk),
        _grow_job_rows,
        lambda world: str(world.objects["job"]),
    ),
    Case(
        "job samples",
        _page("training:job_samples", job_id=lambda world: world.objects["job"].pk),
        _grow_job_rows,
        lambda world: f"task-{world.added - 1}",
    ),
    Case("version list", _list("registry:version_list"), _grow_agents, lambda world: f"agent-{world.added - 1}"),
    Case(
        "agent versions",
        _page("registry:agent_versions", agent_name=lambda world: "shop"),
        _grow_versions,
        lambda world: f"shop:v{world.added}",
    ),
    Case(
        "version detail",
        _page("registry:version_detail", agent_name=lambda world: "shop", number=lambda world: 1),
        _grow_gates,
        lambda world: "shop:v1",
    ),
    Case("monitoring", _list("monitoring:index"), _grow_agents, lambda world: f"agent-{world.added - 1}"),
    Case(
        "agent monitor",
        _page("monitoring:agent_monitor", agent_name=lambda world: "shop"),
        add_trajectories,
        lambda world: "shop:v1",
    ),
    Case("agent list", _list("core:agent_list"), _grow_agents, lambda world: f"agent-{world.added - 1}"),
    Case("agent detail", _page("core:agent_detail", name=lambda world: "shop"), add_trajectories, lambda world: "shop"),
    Case(
        "bucket judgings",
        _page("rewards:judge_buckets", agent_name=lambda world: "shop"),
        _grow_judgings,
        lambda world: str(world.objects["judgings"][-1].job),
    ),
    Case("audit log", _list("core:audit_list"), _grow_audit, lambda world: "load.test"),
    Case("API tokens", _list("core:token_list"), _grow_tokens, lambda world: f"token {world.added - 1}"),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_page_reads_in_as_many_queries_for_many_rows_as_for_a_few(
    case: Case, world: World, client, django_assert_max_num_queries
) -> None:
    client.force_login(world.viewer)
    case.grow(world, FEW)
    summaries_recount()  # as beat does: pages read the count summaries (a missing one is counted by the page)
    with CaptureQueriesContext(connection) as few:
        response = client.get(case.url(world))
    assert response.status_code == 200, response.content[:500]
    case.grow(world, MANY - FEW)
    summaries_recount()
    with django_assert_max_num_queries(len(few)):
        response = client.get(case.url(world))
    assert response.status_code == 200
    assert case.newest(world) in response.content.decode(), f"{case.name} does not show its newest rows"
