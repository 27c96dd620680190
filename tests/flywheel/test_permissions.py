"""The permission matrix: every URL pattern, for anonymous callers, each role, and an outsider.

The patterns are read from the URLconf, so a new page without a permission check fails here.
Each view declares what it requires (`flywheel.core.access`); the roles' permissions are the
table in `flywheel.core.roles` (documented in README.md, "Roles"). The outsider is a member of
another agent: every URL that names an object answers 404 for one of agent A's, and no list page
or API shows any of agent A's rows (`flywheel.core.selectors`, per-agent access).
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.urls.converters import IntConverter, SlugConverter, UUIDConverter
from django.utils import timezone

from flywheel.core.access import ANY_SIGNED_IN
from flywheel.core.models import Agent
from flywheel.core.roles import ROLE_PERMISSIONS, Perm, Role
from flywheel.core.services import agent_create, api_token_create
from flywheel.dashboards.selectors import (
    dashboard_counts,
    failures_by_agent,
    failures_by_bucket,
    failures_by_day,
    failures_by_model_version,
)
from flywheel.datasets.importers import read
from flywheel.datasets.models import RegressionTask, TaskSetSnapshot
from flywheel.datasets.services import BatchSettings, snapshot_create, synthetic_batch_create, tasks_import
from flywheel.ingest.models import Trajectory, Upload
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.ingest.services import IngestOptions, stream_ingest, upload_create, upload_process
from flywheel.monitoring.models import Alert, MonitoredRate
from flywheel.monitoring.services import RuleFields, rule_create
from flywheel.registry.models import (
    Deployment,
    DeploymentAction,
    GateResult,
    GateStatus,
    LivePointer,
    ModelVersion,
    Replay,
    ReplayStatus,
)
from flywheel.registry.replay import replay_input
from flywheel.registry.services import version_register
from flywheel.rewards.models import OutputSource, ProfileRun
from flywheel.rewards.services import Scoring, profile_create, reverify
from flywheel.training.models import EvalRun, Job, JobKind, JobState, Sample
from flywheel.triage.models import Bucket, Review, ReviewState
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.services import CorrectionInput, bucket_bulk_assign, correction_create, queue_create
from tests.conftest import REPO_ROOT
from trainer.verifiers.safety import SafetyPolicy

TINY_TASKS = REPO_ROOT / "trainer" / "examples" / "tiny_tasks.jsonl"

NOT_ALLOWED = {401, 403}


@dataclass(frozen=True)
class Endpoint:
    url: str
    name: str
    required: str | None  # None: public
    is_api: bool
    params: tuple[str, ...] = ()  # the URL's keywords: an object it names

    def __str__(self) -> str:
        return self.name


def _sample_value(converter: Any) -> Any:
    if isinstance(converter, UUIDConverter):
        return uuid.UUID(int=0)
    if isinstance(converter, IntConverter):
        return 999_999
    if isinstance(converter, SlugConverter):
        return "no-such-thing"
    return "x"


def _walk(patterns: list, namespace: str = "") -> list[tuple[str, URLPattern]]:
    found = []
    for entry in patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin":
                continue  # Django's admin checks is_staff itself; see test_the_admin_needs_staff
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            found += _walk(entry.url_patterns, inner)
        else:
            found.append((f"{namespace}{entry.name}", entry))
    return found


def _endpoints() -> list[Endpoint]:
    endpoints = []
    for name, pattern in _walk(get_resolver().url_patterns):
        kwargs = {key: _sample_value(conv) for key, conv in pattern.pattern.converters.items()}
        callback = pattern.callback
        if not hasattr(callback, "required_permission"):
            pytest.fail(f"{name} has no permission check (use permission_required or public)")
        required = callback.required_permission
        is_api = getattr(callback, "is_api", False)
        endpoints.append(Endpoint(reverse(name, kwargs=kwargs), name, required, is_api, tuple(kwargs)))
    return endpoints


ENDPOINTS = _endpoints()
PERSONAS: list[Role | None] = [*Role, None]


def test_every_endpoint_is_in_the_matrix():
    assert {endpoint.name for endpoint in ENDPOINTS} >= {"dashboards:home", "core:api_me", "healthz", "login"}


def _allowed(required: str | None, role: Role | None) -> bool:
    if required is None or required == ANY_SIGNED_IN:
        return True
    return role is not None and required in ROLE_PERMISSIONS[role]


def _is_login_redirect(response) -> bool:
    return response.status_code == 302 and response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_anonymous_callers_get_a_login_redirect_or_401(client, endpoint):
    response = client.get(endpoint.url)
    if endpoint.required is None:
        assert response.status_code not in NOT_ALLOWED and not _is_login_redirect(response)
    elif endpoint.is_api:
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
    else:
        assert _is_login_redirect(response)


@pytest.mark.django_db
@pytest.mark.parametrize("role", PERSONAS, ids=lambda role: role.value if role else "no-role")
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_each_role_gets_the_documented_answer(client, make_user, endpoint, role):
    client.force_login(make_user(role))
    response = client.get(endpoint.url)
    if _allowed(endpoint.required, role):
        assert response.status_code not in NOT_ALLOWED, response.content[:300]
        assert not _is_login_redirect(response)
    else:
        assert response.status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.VIEWER, Role.APPROVER])
def test_the_admin_needs_staff(client, make_user, role):
    client.force_login(make_user(role))
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


# --- Per-agent access: a member of agent A, and an outsider who is a member of agent B only --------
#
# Both personas hold every permission of every role but not the all-agents grant, so a 404 or a
# missing row can only come from the agent check. Each URL that takes an object id is asked about an
# object of agent A; each list page and API is read for any trace of agent A's rows.

ALPHA, BRAVO = "alpha-agent", "bravo-agent"
ID_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if endpoint.params]
LIST_ENDPOINTS = [endpoint for endpoint in ENDPOINTS if not endpoint.params and endpoint.required is not None]


@dataclass(frozen=True)
class World:
    member: Any
    outsider: Any
    objects: dict[str, Any]  # URL keyword -> the value that names an object of agent A
    markers: dict[str, str]  # a row of agent A -> text that shows it on a page


@pytest.fixture(scope="session")
def alpha_adapter(tmp_path_factory) -> Path:
    from tests.flywheel.registry.conftest import make_adapter

    return make_adapter(tmp_path_factory.mktemp("alpha-adapter") / "adapter", seed=1)


def _persona(make_user, agent: Agent) -> Any:
    """A member of `agent` with every permission except the all-agents grant."""
    user = make_user(None, agents=[agent])
    codenames = [perm.codename for perm in Perm if perm is not Perm.ALL_AGENTS]
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="core", codename__in=codenames))
    return type(user).objects.get(pk=user.pk)  # a fresh permission cache


def _trajectory(agent: Agent) -> Trajectory:
    steps = [{"kind": "user", "text": "Where is order 17?"},
             {"kind": "tool_call", "tool": "find_order", "arguments": {"order": 17}, "call_id": "c1"}]  # fmt: skip
    record = {"id": f"{agent.name}-run", "agent": agent.name, "outcome": "failure",
              "model_version": f"{agent.name}:v1", "steps": steps}  # fmt: skip
    stream_ingest(stream=io.BytesIO(json.dumps(record).encode() + b"\n"), options=IngestOptions(format="native"))
    return Trajectory.objects.get(agent=agent)


def _registry(agent: Agent, snapshot: TaskSetSnapshot, adapter: Path) -> tuple[ModelVersion, GateResult]:
    """A registered version of `agent`, live on a passed gate."""
    version = version_register(actor=None, agent=agent, adapter_dir=adapter, base_model="tiny")
    gate_job = Job.objects.create(kind=JobKind.GATE, state=JobState.SUCCEEDED, snapshot=snapshot, agent=agent,
                                  base_model="tiny", finished_at=timezone.now())  # fmt: skip
    gate = GateResult.objects.create(job=gate_job, candidate=version, policy={}, report={}, status=GateStatus.PASSED,
                                     decision={"passed": True, "criteria": []})  # fmt: skip
    deployment = Deployment.objects.create(agent=agent, action=DeploymentAction.PROMOTE, to_version=version,
                                           to_sha256=version.adapter_sha256, gate_result=gate)  # fmt: skip
    LivePointer.objects.create(agent=agent, version=version, deployment=deployment)
    return version, gate


def _replay(trajectory: Trajectory, version: ModelVersion, user: Any) -> Replay:
    """The trajectory's failing step, answered by `version` (a finished replay job)."""
    prepared = replay_input(trajectory=trajectory)
    job = Job.objects.create(kind=JobKind.REPLAY, state=JobState.SUCCEEDED, snapshot=None, cases=[prepared.case],
                             agent=trajectory.agent, base_model="tiny", finished_at=timezone.now())  # fmt: skip
    scores = {"calls": [], "valid_json": None, "unsafe": False, "reason": ""}
    return Replay.objects.create(trajectory=trajectory, version=version, job=job, step_index=prepared.step_index,
                                 was_live=True, status=ReplayStatus.DONE, answer="I cannot find it.", scores=scores,
                                 launched_by=user)  # fmt: skip


def _profile_run(snapshot: TaskSetSnapshot) -> ProfileRun:
    """A reward profile of the snapshot, re-verified: the re-verify has a run to compare with."""
    lines = [json.dumps({"id": item.content["id"], "output": "no call"}) for item in snapshot.items.all()]
    scoring = Scoring(verifier="tool_call", policy=SafetyPolicy.default().to_json())
    root = profile_create(actor=None, snapshot=snapshot, scoring=scoring, source_kind=OutputSource.UPLOAD,
                          sample_size=3, lines=lines, source_name="alpha-outputs.jsonl")  # fmt: skip
    return reverify(actor=None, run=root, scoring=scoring)


@pytest.fixture
def world(make_user, alpha_adapter, settings, tmp_path) -> World:
    """Agent A with a row of every kind (trajectory, upload, queue, task, snapshot, job, version, gate, run)."""
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    alpha, bravo = agent_create(actor=None, name=ALPHA), agent_create(actor=None, name=BRAVO)
    member, outsider = _persona(make_user, alpha), _persona(make_user, bravo)
    trajectory = _trajectory(alpha)
    bucket_bulk_assign(actor=member, bucket=Bucket.objects.order_by("position").first(), trajectory_ids=[trajectory.pk])
    fix = CorrectionInput(step_index=1, answer="Order 17 is on its way.", make_pair=True)
    pair = correction_create(actor=member, trajectory=trajectory, fix=fix).pair
    upload = Upload.objects.create(uploaded_by=member, file="uploads/alpha.jsonl", original_name="alpha-upload.jsonl",
                                   size=1, sha256="0" * 64, format="native", agent_name=ALPHA)  # fmt: skip
    queue = queue_create(actor=member, name="alpha-queue", filters=TriageFilters(base=TrajectoryFilters(agent=ALPHA)))
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="train", agent=alpha, source_ref="tiny")
    snapshot = snapshot_create(actor=None, name="alpha train", split="train", agent=alpha)
    batch = synthetic_batch_create(actor=member, agent=alpha, settings=BatchSettings())
    job = Job.objects.create(kind=JobKind.EVAL, state=JobState.SUCCEEDED, snapshot=snapshot, agent=alpha,
                             base_model="tiny", attempts=1, finished_at=timezone.now(), launched_by=member)  # fmt: skip
    task_id = snapshot.items.first().content["id"]
    episode = [{"role": "assistant", "content": "Done."}]
    EvalRun.objects.create(job=job, snapshot=snapshot, model_label="tiny", metrics={}, results=[
        {"task_id": task_id, "turns": 1, "ended": "answered", "episode": episode}])  # fmt: skip
    sample = Sample.objects.create(job=job, step=0, task_id=task_id, prompt="", completion="Done.", reward=0.0,
                                   episode=episode)  # fmt: skip
    version, gate = _registry(alpha, snapshot, alpha_adapter)
    replay = _replay(trajectory, version, member)
    run = _profile_run(snapshot)
    token, _ = api_token_create(user=member, name="alpha-token")
    task = RegressionTask.objects.filter(agent=alpha).first()
    rule = rule_create(actor=member, agent=alpha, fields=RuleFields(name="alpha-rule"))
    alert = Alert.objects.create(agent=alpha, version=version, predecessor=version, rate=MonitoredRate.UNSAFE,
                                 live_events=6, live_total=6, predecessor_events=0, predecessor_total=6,
                                 p_value=0.0003)  # fmt: skip
    objects = {
        "trajectory_id": trajectory.pk, "upload_id": upload.pk, "queue_id": queue.pk, "task_id": task.pk,
        "snapshot_id": snapshot.pk, "format_name": "native", "job_id": job.pk, "agent_name": ALPHA, "name": ALPHA,
        "number": version.number, "gate_id": gate.pk, "run_id": run.pk, "output_id": run.outputs.first().pk,
        "token_id": token.pk, "index": 0, "sample_id": sample.pk, "external_id": trajectory.external_id,
        "rule_id": rule.pk, "alert_id": alert.pk,
        "replay_id": replay.pk, "batch_id": batch.pk,
        "baseline_job_id": job.pk, "candidate_job_id": job.pk,
    }  # fmt: skip
    markers = {
        "agent": ALPHA, "trajectory": str(trajectory.pk), "upload": str(upload.pk), "queue": queue.name,
        "task": str(task.pk), "snapshot": str(snapshot.pk), "job": str(job.pk), "run": str(run.pk),
        "alert": str(alert.pk), "pair": str(pair.pk), "synthetic batch": str(batch.pk),
    }  # fmt: skip
    return World(member, outsider, objects, markers)


def _ask(client, url: str):
    """GET, or POST where the endpoint takes only POST (its form then fails validation, or acts on the object)."""
    response = client.get(url)
    return client.post(url) if response.status_code == 405 else response


def _text(response) -> str:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return body.decode(errors="replace")


@pytest.mark.slow  # a world of agent A's rows per endpoint: about two seconds each
@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ID_ENDPOINTS, ids=str)
def test_an_outsider_gets_404_for_another_agents_object_and_a_member_does_not(client, world, endpoint):
    url = reverse(endpoint.name, kwargs={param: world.objects[param] for param in endpoint.params})
    client.force_login(world.outsider)
    outsider = _ask(client, url)
    client.force_login(world.member)
    member = _ask(client, url)
    assert outsider.status_code == 404, _text(outsider)[:300]
    assert member.status_code not in {401, 403, 404}, _text(member)[:300]


@pytest.mark.slow  # a world of agent A's rows per endpoint: about two seconds each
@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", LIST_ENDPOINTS, ids=str)
def test_an_outsider_sees_none_of_another_agents_rows(client, world, endpoint):
    client.force_login(world.outsider)
    response = _ask(client, endpoint.url)
    text = _text(response)
    assert [row for row, marker in world.markers.items() if marker in text] == []


@pytest.mark.django_db
def test_a_member_sees_every_row_the_outsider_must_not(client, world):
    """The markers are real: each shows on some page of a member (else the test above proves nothing)."""
    client.force_login(world.member)
    text = "".join(_text(client.get(endpoint.url)) for endpoint in LIST_ENDPOINTS if not endpoint.is_api)
    assert [row for row, marker in world.markers.items() if marker not in text] == []


@pytest.mark.django_db
def test_an_outsiders_home_page_counts_none_of_another_agents_rows(client, world):
    counts = {}
    for persona in (world.member, world.outsider):
        client.force_login(persona)
        context = client.get(reverse("dashboards:home")).context
        counts[persona] = (context["counts"].trajectories, context["counts"].unreviewed_failures,
                           context["tasks"].train, context["tasks"].snapshots, context["jobs"].last_finished,
                           len(context["live_versions"]))  # fmt: skip
        counts[persona] += (len(context["alerts"]),)
    assert counts[world.outsider] == (0, 0, 0, 0, None, 0, 0)
    assert counts[world.member][6] == 1
    assert counts[world.member][:4] == (1, 1, 5, 1) and counts[world.member][4] is not None


@pytest.mark.django_db
def test_an_outsiders_charts_count_none_of_another_agents_failures(world):
    outsider, member = dashboard_counts(viewer=world.outsider), dashboard_counts(viewer=world.member)
    for selector in (failures_by_day, failures_by_agent, failures_by_model_version):
        assert selector(outsider) == []
        assert selector(member) != []
    assert sum(row.assigned for row in failures_by_bucket(outsider)) == 0
    assert sum(row.assigned for row in failures_by_bucket(member)) == 1


@pytest.mark.django_db
def test_an_outsider_cannot_launch_a_job_on_another_agents_snapshot(client, world):
    snapshot = world.objects["snapshot_id"]
    body = json.dumps({"kind": "eval", "snapshot": str(snapshot), "base_model": "tiny"})
    client.force_login(world.outsider)
    api = client.post(reverse("training:api_jobs"), body, content_type="application/json")
    page = client.post(reverse("training:job_new"), {"kind": "eval", "snapshot": snapshot, "base_model": "tiny"})
    assert api.status_code == 400 and page.status_code == 400
    assert not Job.objects.filter(launched_by=world.outsider).exists()
    client.force_login(world.member)
    assert client.post(reverse("training:api_jobs"), body, content_type="application/json").status_code == 201


@pytest.mark.django_db
def test_an_outsider_cannot_ingest_into_another_agent(client, world):
    line = json.dumps({"id": "sneaked-in", "agent": ALPHA, "steps": [{"kind": "user", "text": "hi"}]})
    client.force_login(world.outsider)
    named = client.post(
        reverse("ingest:api_trajectories") + f"?agent={ALPHA}", line, content_type="application/x-ndjson"
    )
    in_record = client.post(reverse("ingest:api_trajectories"), line, content_type="application/x-ndjson")
    assert named.status_code == 403
    assert in_record.status_code == 207 and in_record.json()["results"][0]["status"] == "rejected"
    assert not Trajectory.objects.filter(external_id="sneaked-in").exists()
    client.force_login(world.member)
    assert client.post(reverse("ingest:api_trajectories"), line, content_type="application/x-ndjson").status_code == 207
    assert Trajectory.objects.filter(external_id="sneaked-in", agent__name=ALPHA).exists()


@pytest.mark.django_db
def test_an_outsiders_bulk_action_leaves_another_agents_trajectories_alone(client, world):
    client.force_login(world.outsider)
    trajectory_id = world.objects["trajectory_id"]
    for scope in ("selected", "all"):
        client.post(reverse("triage:bulk"), {"action": "mark_reviewed", "scope": scope, "ids": [trajectory_id]})
    assert not Review.objects.filter(trajectory_id=trajectory_id, state=ReviewState.REVIEWED).exists()


@pytest.mark.django_db
def test_an_outsider_cannot_snapshot_every_agent_or_another_agent(client, world):
    client.force_login(world.outsider)
    for agent in ("", str(Agent.objects.get(name=ALPHA).pk)):
        response = client.post(
            reverse("datasets:snapshot_new"), {"name": "all of it", "split": "train", "agent": agent}
        )
        assert response.status_code == 200 and response.context["form"].errors
    assert not TaskSetSnapshot.objects.filter(name="all of it").exists()


@pytest.mark.django_db
def test_an_outsider_cannot_chat_with_another_agents_model(client, world):
    body = json.dumps({"model": ALPHA, "messages": [{"role": "user", "content": "hi"}]})
    client.force_login(world.outsider)
    response = client.post(reverse("registry:chat_completions"), body, content_type="application/json")
    assert response.status_code == 404


@pytest.mark.django_db
def test_an_outsider_cannot_upload_into_another_agent(client, world):
    upload = SimpleUploadedFile("sneak.jsonl", b'{"id": "sneaked-in", "steps": []}\n')
    client.force_login(world.outsider)
    response = client.post(reverse("ingest:upload_new"), {"file": upload, "format": "native", "agent": ALPHA})
    assert response.status_code == 403
    assert not Upload.objects.filter(original_name="sneak.jsonl").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("url_name", ["datasets:task_new", "demo:loop_start"])
def test_writes_of_no_agent_or_every_agent_need_the_all_agents_grant(client, world, url_name):
    """A task of no agent is for all-agents users only; the demo loop makes and trains its own agents."""
    client.force_login(world.outsider)
    assert _ask(client, reverse(url_name)).status_code == 403


@pytest.mark.django_db
def test_an_outsiders_upload_stores_their_agents_records_and_rejects_another_agents(world):
    lines = [json.dumps({"id": f"{agent}-uploaded", "agent": agent, "steps": [{"kind": "user", "text": "hi"}]})
             for agent in (BRAVO, ALPHA)]  # fmt: skip
    file = SimpleUploadedFile("mixed.jsonl", "\n".join(lines).encode())
    upload = upload_create(user=world.outsider, file=file, format="native", mapping={})
    upload = upload_process(upload_id=upload.pk)
    assert (upload.stored, upload.rejected) == (1, 1)
    assert "alpha-agent" in upload.errors[0]["reason"] and upload.errors[0]["line"] == 2
    assert list(Trajectory.objects.filter(external_id__endswith="-uploaded").values_list("agent__name", flat=True)) == [
        BRAVO
    ]


@pytest.mark.django_db
def test_a_task_repeating_another_agents_task_is_flagged_without_naming_it(client, world):
    bravo = Agent.objects.get(name=BRAVO)
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="train", agent=bravo, source_ref="tiny")
    repeat = RegressionTask.objects.filter(agent=bravo, duplicate_of__agent__name=ALPHA).first()
    client.force_login(world.outsider)
    page = client.get(reverse("datasets:task_detail", args=[repeat.pk])).content.decode()
    assert "another task in this split" in page
    assert str(repeat.duplicate_of_id) not in page
