"""Count summaries (`CountSummary`): after each kind of change and a recount (beat's task), every number the
home page, the dashboards and the queues show equals a count made afresh, for each viewer's agents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Count, Q

from flywheel.core.models import Agent, CountSummary
from flywheel.core.roles import Role
from flywheel.core.selectors import agents_filter
from flywheel.dashboards import selectors as dashboards
from flywheel.dashboards import services as dashboard_services
from flywheel.dashboards import tasks
from flywheel.ingest.models import Outcome, Trajectory
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.monitoring.selectors import monitor_get, window_start
from flywheel.triage import selectors as triage
from flywheel.triage import services
from flywheel.triage.models import Bucket, BucketAssignment, Queue, Review, ReviewState, Suggestion
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.services import BucketChoice
from tests.flywheel.triage.conftest import call, result, shop_record, user

pytestmark = pytest.mark.django_db


def _failing(external_id: str, agent: str = "shop", version: str = "v1") -> dict[str, Any]:
    steps = [user(), call("lookup_order", {"order_id": "1"}), result("lookup_order", "Error", error=True)]
    return shop_record(external_id, steps, agent=agent, model_version=f"{agent}:{version}")


@pytest.fixture
def world(store, make_user) -> dict[str, Any]:
    stored = store(
        _failing("s1"), _failing("s2", version="v2"), shop_record("s3", [user()], outcome="success"),
        _failing("b1", agent="bank"), shop_record("b2", [user()], agent="bank", outcome="success"),
    )  # fmt: skip
    shop, bank = Agent.objects.get(name="shop"), Agent.objects.get(name="bank")
    reviewer = make_user(Role.REVIEWER, "rita")
    failures = services.queue_create(actor=reviewer, name="failures", filters=TriageFilters(base=TrajectoryFilters(
        outcome="failure")))  # fmt: skip
    picked = services.queue_create(actor=reviewer, name="picked", filters=TriageFilters())
    return {
        "stored": stored, "reviewer": reviewer, "queues": [failures, picked],
        "viewers": {"all": make_user(Role.VIEWER), "shop": make_user(Role.VIEWER, agents=[shop]),
                    "bank": make_user(Role.VIEWER, agents=[bank])},
    }  # fmt: skip


def _exact_dashboard(viewer: User) -> dict[str, Any]:
    """The dashboard's numbers counted afresh from the rows, for the agents `viewer` may see."""
    rows = Trajectory.objects.filter(agents_filter(viewer))
    versions = {
        row["model_version"]: (row["failures"], row["total"])
        for row in rows.values("model_version").annotate(
            failures=Count("pk", filter=Q(outcome=Outcome.FAILURE)), total=Count("pk")
        )
    }
    unreviewed = Q(review__isnull=True) | Q(review__state=ReviewState.UNREVIEWED)
    buckets = {}
    for bucket in Bucket.objects.all():
        assigned = BucketAssignment.objects.filter(trajectory__in=rows, bucket=bucket).count()
        awaiting = (
            Suggestion.objects.filter(trajectory__in=rows, bucket=bucket)
            .exclude(trajectory__review__state=ReviewState.REVIEWED)
            .values("trajectory")
            .distinct()
            .count()
        )
        buckets[bucket.name] = (assigned, awaiting)
    return {
        "home": (rows.count(), rows.filter(outcome=Outcome.FAILURE).count(),
                 rows.filter(unreviewed, outcome=Outcome.FAILURE).count(),
                 Review.objects.filter(trajectory__in=rows, state=ReviewState.REVIEWED).count()),
        "versions": {tag or "(none)": counts for tag, counts in versions.items()},
        "agents": {name: (rows.filter(agent__name=name, outcome=Outcome.FAILURE).count(),
                          rows.filter(agent__name=name).count())
                   for name in rows.values_list("agent__name", flat=True).distinct()},
        "buckets": buckets,
    }  # fmt: skip


def _shown_dashboard(viewer: User) -> dict[str, Any]:
    counted = dashboards.dashboard_counts(viewer=viewer)
    home = dashboards.home_counts(counted, viewer=viewer)
    return {
        "home": (home.trajectories, home.failures, home.unreviewed_failures, home.reviewed),
        "versions": {g.label: (g.failures, g.total) for g in dashboards.failures_by_model_version(counted)},
        "agents": {g.label: (g.failures, g.total) for g in dashboards.failures_by_agent(counted)},
        "buckets": {b.name: (b.assigned, b.awaiting) for b in dashboards.failures_by_bucket(counted)},
    }


def _queue_numbers(queue: Queue, viewer: User) -> tuple[tuple[int, ...], tuple[int, ...]]:
    shown = triage.queue_progress_counted([queue], viewer=viewer)[queue.pk]
    exact = triage.queue_progress(queue, viewer=viewer)
    return (shown.total, shown.reviewed, shown.skipped, shown.claimed), (
        exact.total, exact.reviewed, exact.skipped, exact.claimed)  # fmt: skip


def _monitored(agent: Agent) -> tuple[dict[str, int], dict[str, int]]:
    """Per version tag: the monitor page's trajectories, and a fresh count of the window's."""
    shown = {row.tag: row.trajectories for row in monitor_get(agent=agent).versions}
    window = Trajectory.objects.filter(agent=agent, ingested_at__gte=window_start())
    return shown, dict(window.values("model_version").annotate(n=Count("pk")).values_list("model_version", "n"))


def _check(world: dict[str, Any]) -> None:
    # beat's recount: the dashboards, each queue and each agent's monitor
    assert dashboard_services.summaries_recount() == 1 + Queue.objects.count() + Agent.objects.count()
    for agent in Agent.objects.all():
        shown, exact = _monitored(agent)
        assert shown == exact, agent.name
    for name, viewer in world["viewers"].items():
        assert _shown_dashboard(viewer) == _exact_dashboard(viewer), name
        for queue in world["queues"]:
            shown, exact = _queue_numbers(queue, viewer)
            assert shown == exact, (name, queue.name)


def _review(world: dict[str, Any]) -> None:
    services.review_submit(actor=world["reviewer"], trajectory=world["stored"]["s1"],
                           choices=[BucketChoice(Bucket.objects.get(slug="incomplete_execution"), 2)])  # fmt: skip


def _skip(world: dict[str, Any]) -> None:
    services.review_skip(actor=world["reviewer"], trajectory=world["stored"]["b1"])


def _claim(world: dict[str, Any]) -> None:
    services.queue_next(queue=world["queues"][0], reviewer=world["reviewer"])


def _bulk_review(world: dict[str, Any]) -> None:
    services.review_bulk_mark_reviewed(actor=world["reviewer"], trajectory_ids=[world["stored"]["s2"].pk])


def _bulk_bucket(world: dict[str, Any]) -> None:
    services.bucket_bulk_assign(actor=world["reviewer"], bucket=Bucket.objects.get(slug="wrong_tool"),
                                trajectory_ids=[world["stored"]["s3"].pk, world["stored"]["b2"].pk])  # fmt: skip


def _add_items(world: dict[str, Any]) -> None:
    ids = [world["stored"]["s3"].pk, world["stored"]["b2"].pk, world["stored"]["s1"].pk]
    services.queue_items_add(actor=world["reviewer"], queue=world["queues"][1], trajectory_ids=ids)


def _remove_item(world: dict[str, Any]) -> None:
    services.queue_item_remove(actor=world["reviewer"], queue=world["queues"][0], trajectory=world["stored"]["b1"])


def _arrive(world: dict[str, Any], store: Callable[..., Any]) -> None:
    world["stored"].update(store(_failing("s4", version="v3"), _failing("b3", agent="bank")))


def _refilter(world: dict[str, Any]) -> None:
    queue = world["queues"][0]
    services.queue_update(actor=world["reviewer"], queue=queue, name=queue.name, reviewers=[],
                          filters=TriageFilters(base=TrajectoryFilters(agent="bank")))  # fmt: skip


CHANGES = [_review, _skip, _claim, _bulk_review, _bulk_bucket, _add_items, _remove_item, _refilter]


def test_every_count_shown_equals_a_fresh_count_after_each_kind_of_change(world, store):
    _check(world)
    for change in CHANGES:
        change(world)
        _check(world)
    _arrive(world, store)
    _check(world)


def test_a_viewer_adds_up_only_their_agents_summaries(world):
    dashboard_services.summaries_recount()
    shown = {name: _shown_dashboard(viewer)["home"] for name, viewer in world["viewers"].items()}
    assert shown == {"all": (5, 3, 3, 0), "shop": (3, 2, 2, 0), "bank": (2, 1, 1, 0)}
    assert triage.queue_progress_counted([world["queues"][0]], viewer=world["viewers"]["bank"])[
        world["queues"][0].pk].total == 1  # fmt: skip


def test_the_pages_show_the_last_count_and_when_it_was_made(world):
    dashboard_services.summaries_recount()
    counted_at = CountSummary.objects.get(kind=dashboards.DASHBOARD_KIND, agent__name="shop").counted_at
    _review(world)  # not recounted yet
    viewer = world["viewers"]["all"]
    home = dashboards.home_counts(dashboards.dashboard_counts(viewer=viewer), viewer=viewer)
    assert (home.reviewed, home.counted_at) == (0, counted_at)


def test_the_monitor_page_is_as_of_its_count(world, store):
    shop = Agent.objects.get(name="shop")
    before = monitor_get(agent=shop)  # none yet: counted now
    store(_failing("s9", version="v9"))
    again = monitor_get(agent=shop)
    assert (again.counted_at, "shop:v9" in {row.tag for row in again.versions}) == (before.counted_at, False)
    dashboard_services.summaries_recount()
    assert "shop:v9" in {row.tag for row in monitor_get(agent=shop).versions}


def test_a_reviewers_own_save_and_skip_show_in_the_queue_progress_before_any_recount(world):
    dashboard_services.summaries_recount()
    viewer, failures, picked = world["viewers"]["all"], *world["queues"]
    services.queue_items_add(actor=world["reviewer"], queue=picked, trajectory_ids=[world["stored"]["s1"].pk])
    services.queue_summaries_recount(queue_ids=[picked.pk])
    _review(world)  # s1: in both queues
    _skip(world)  # b1: a failure, in the first only
    services.review_skip(actor=world["reviewer"], trajectory=world["stored"]["s1"])  # stays reviewed: no change
    for queue in (failures, picked):
        shown, exact = _queue_numbers(queue, viewer)
        assert shown == exact, queue.name
    assert triage.queue_progress_counted([failures], viewer=viewer)[failures.pk].skipped == 1
    by_reviewer = {row.username: (row.reviewed, row.skipped) for row in triage.queue_reviewers_counted(
        failures, viewer=viewer)}  # fmt: skip
    assert by_reviewer["rita"] == (1, 1)


def test_beat_recounts_the_summaries_paced():
    assert settings.CELERY_BEAT_SCHEDULE["recount-summaries"]["task"] == tasks.summaries_recount_paced.name


class _Clock:
    """A clock that moves only when told, and by `per_recount` seconds during each recount."""

    def __init__(self, per_recount: float) -> None:
        self.now = 1_000_000.0
        self.per_recount = per_recount

    def __call__(self) -> float:
        return self.now


def _paced_with(clock: _Clock, monkeypatch) -> Callable[[], int]:
    from django.core.cache import cache

    cache.clear()
    recount = dashboard_services.summaries_recount

    def slow_recount() -> int:
        clock.now += clock.per_recount
        return recount()

    monkeypatch.setattr(dashboard_services, "summaries_recount", slow_recount)
    return lambda: dashboard_services.summaries_recount_paced(clock=clock)


@pytest.mark.django_db
def test_beat_skips_its_ticks_for_nine_times_a_recounts_length_at_a_tenth(monkeypatch, settings):
    settings.SUMMARY_RECOUNT_SHARE = 0.1
    clock = _Clock(per_recount=4.0)
    paced = _paced_with(clock, monkeypatch)
    assert paced() == 1  # the dashboards' summary (no queue, no agent)
    clock.now += 35.9  # a recount of 4 s rests 36 s
    assert paced() == 0
    clock.now += 0.2
    assert paced() == 1
    assert paced() == 0


@pytest.mark.django_db
def test_beat_never_rests_past_half_the_staleness_limit(monkeypatch, settings):
    settings.SUMMARY_RECOUNT_SHARE = 0.1
    settings.SUMMARY_STALE_SECONDS = 300
    clock = _Clock(per_recount=100.0)  # 900 s of rest by the share alone: the pages would recount first
    paced = _paced_with(clock, monkeypatch)
    assert paced() == 1
    clock.now += 149
    assert paced() == 0
    clock.now += 2
    assert paced() == 1


@pytest.mark.django_db
def test_a_share_of_one_recounts_at_every_tick(monkeypatch, settings):
    settings.SUMMARY_RECOUNT_SHARE = 1.0
    clock = _Clock(per_recount=30.0)
    paced = _paced_with(clock, monkeypatch)
    assert [paced(), paced(), paced()] == [1, 1, 1]
