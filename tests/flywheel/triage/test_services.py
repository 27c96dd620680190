from __future__ import annotations

import io
import json
from datetime import timedelta
from uuid import uuid4

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils import timezone

from flywheel.core.models import Agent, AuditEvent
from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import Trajectory
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.triage import services, tasks
from flywheel.triage.models import AgentPolicy, Bucket, BucketAssignment, QueueItem, Review, ReviewState, Suggestion
from flywheel.triage.selectors import TriageFilters
from flywheel.triage.services import BucketChoice
from tests.flywheel.ingest.test_otlp import USER_TURN, otlp_json
from tests.flywheel.triage.conftest import call, result, shop_record, user

pytestmark = pytest.mark.django_db
FAILURES = TriageFilters(base=TrajectoryFilters(outcome="failure"))


def bucket(slug: str) -> Bucket:
    return Bucket.objects.get(slug=slug)


@pytest.fixture
def reviewer(make_user):
    return make_user(Role.REVIEWER, "rita")


@pytest.fixture
def three(store) -> list[Trajectory]:
    stored = store(
        shop_record(
            "a", [user(), call("refund_order", {"order_id": "1"}), result("refund_order", "Error: x", error=True)]
        ),
        shop_record("b", [user(), {"kind": "assistant", "text": "Sorry."}]),
        shop_record("c", [user(), call("refund_order", {"order_id": "3", "amount": 1})], outcome="success"),
    )
    return [stored["a"], stored["b"], stored["c"]]


# --- suggestions ---------------------------------------------------------------------------


def test_computing_suggestions_twice_replaces_them_instead_of_adding(three):
    before = list(Suggestion.objects.order_by("trajectory__external_id", "rule").values_list("rule", flat=True))
    services.suggestions_compute(trajectory_ids=[t.pk for t in three])
    after = list(Suggestion.objects.order_by("trajectory__external_id", "rule").values_list("rule", flat=True))
    assert before == after == ["missing-required-arguments", "unrecovered-tool-error", "needs-review"]


def test_computing_suggestions_creates_unreviewed_reviews_and_notes_when(three):
    review = Review.objects.get(trajectory=three[2])
    assert review.state == ReviewState.UNREVIEWED and review.suggested_at is not None


def test_ids_of_trajectories_that_are_gone_are_ignored(three):
    assert services.suggestions_compute(trajectory_ids=["00000000-0000-0000-0000-000000000000"]) == 0


def test_the_ingest_hook_enqueues_after_commit_and_only_stored_ids(monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("flywheel.triage.tasks.compute_suggestions.delay", sent.append)
    trajectory_id = uuid4()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.suggestions_schedule(trajectory_ids=[trajectory_id, None])
        assert sent == []
    for callback in callbacks:
        callback()
    assert sent == [[str(trajectory_id)]]


@pytest.fixture
def suggest_now(monkeypatch) -> list[list[str]]:
    """Run `compute_suggestions` in place of sending it; the ids of each send, in order."""
    sent: list[list[str]] = []

    def run(ids: list[str]) -> None:
        sent.append(ids)
        tasks.compute_suggestions(ids)

    monkeypatch.setattr("flywheel.triage.tasks.compute_suggestions.delay", run)
    return sent


def test_a_file_stored_by_ingest_is_suggested_for_through_its_signal(suggest_now, django_capture_on_commit_callbacks):
    records = [shop_record("a", [user(), call("refund_order", {"order_id": "1"})]), shop_record("b", [user()])]
    data = b"".join(json.dumps(record).encode() + b"\n" for record in records)
    with django_capture_on_commit_callbacks(execute=True):
        stream_ingest(stream=io.BytesIO(data), options=IngestOptions(format="native"))
    stored = Trajectory.objects.order_by("external_id")
    assert suggest_now == [[str(pk) for pk in stored.order_by("ingested_at").values_list("pk", flat=True)]]
    assert Review.objects.filter(trajectory__in=stored, suggested_at__isnull=False).count() == 2
    assert Suggestion.objects.get(trajectory=stored[0]).rule == "missing-required-arguments"
    with django_capture_on_commit_callbacks(execute=True):
        stream_ingest(stream=io.BytesIO(data), options=IngestOptions(format="native"))
    assert len(suggest_now) == 1  # duplicates store nothing, so nothing new to suggest for


def test_the_api_and_otlp_ingest_are_suggested_for_too(
    suggest_now, django_capture_on_commit_callbacks, client, make_user
):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=make_user(Role.REVIEWER), name='x')[1]}"}
    body = json.dumps({"batch": [shop_record("api", [user()])]})
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("ingest:api_trajectories"), body, content_type="application/json", **headers)
    span = otlp_json("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(USER_TURN),
    })  # fmt: skip
    for _ in range(2):  # the second export refreshes the trace's trajectory in place: suggested for again
        with django_capture_on_commit_callbacks(execute=True):
            client.post(reverse("otlp_traces"), json.dumps(span), content_type="application/json", **headers)
    api, otlp = Trajectory.objects.get(external_id="api"), Trajectory.objects.get(source="otlp")
    assert suggest_now == [[str(api.pk)], [str(otlp.pk)], [str(otlp.pk)]]
    assert Review.objects.filter(trajectory__in=[api, otlp], suggested_at__isnull=False).count() == 2


def test_a_broker_failure_never_fails_the_ingest(monkeypatch, django_capture_on_commit_callbacks, caplog):
    def unreachable(ids):
        raise ConnectionError("broker down")

    monkeypatch.setattr("flywheel.triage.tasks.compute_suggestions.delay", unreachable)
    with django_capture_on_commit_callbacks(execute=True):
        services.suggestions_schedule(trajectory_ids=[uuid4()])
    assert "broker down" in caplog.text


def test_recompute_without_all_only_takes_trajectories_never_suggested_for(three, reviewer):
    Review.objects.filter(trajectory=three[0]).update(suggested_at=None)
    assert services.suggestions_recompute(actor=reviewer, everything=False) == 1
    assert services.suggestions_recompute(actor=reviewer, everything=True) == 3
    assert AuditEvent.objects.filter(action="suggestions.recompute").count() == 2


# --- reviews -------------------------------------------------------------------------------


def test_submitting_a_review_stores_buckets_with_steps_and_marks_it_reviewed(three, reviewer):
    choices = [BucketChoice(bucket("incomplete_execution"), 2), BucketChoice(bucket("bad_planning"))]
    review = services.review_submit(actor=reviewer, trajectory=three[0], choices=choices, note="gave up")
    assert (review.state, review.reviewer, review.note) == (ReviewState.REVIEWED, reviewer, "gave up")
    rows = BucketAssignment.objects.filter(trajectory=three[0]).order_by("bucket__position")
    assert [(r.bucket.slug, r.step_index, r.source, r.rule) for r in rows] == [
        ("bad_planning", None, "human", ""),
        ("incomplete_execution", 2, "suggestion", "unrecovered-tool-error"),
    ]
    event = AuditEvent.objects.get(action="review.submit")
    assert event.data == {"buckets": {"incomplete_execution": 2, "bad_planning": None}, "before": {}}
    assert event.actor == reviewer and event.target_id == str(three[0].pk)


def test_submitting_again_replaces_the_buckets_and_keeps_unchanged_ones(three, reviewer, make_user):
    services.review_submit(actor=reviewer, trajectory=three[1], choices=[BucketChoice(bucket("wrong_tool"), 1)])
    other = make_user(Role.REVIEWER)
    choices = [BucketChoice(bucket("wrong_tool"), 1), BucketChoice(bucket("retrieval_failure"))]
    services.review_submit(actor=other, trajectory=three[1], choices=choices)
    rows = {r.bucket.slug: r.assigned_by for r in BucketAssignment.objects.filter(trajectory=three[1])}
    assert rows == {"wrong_tool": reviewer, "retrieval_failure": other}
    services.review_submit(actor=other, trajectory=three[1], choices=[])
    assert not BucketAssignment.objects.filter(trajectory=three[1]).exists()


def test_a_step_outside_the_trajectory_is_refused(three, reviewer):
    with pytest.raises(ValidationError, match="step #9"):
        services.review_submit(actor=reviewer, trajectory=three[1], choices=[BucketChoice(bucket("wrong_tool"), 9)])
    assert not BucketAssignment.objects.exists()


def test_skipping_sets_an_unreviewed_trajectory_aside_but_never_unreviews_one(three, reviewer):
    assert services.review_skip(actor=reviewer, trajectory=three[1]).state == ReviewState.SKIPPED
    services.review_submit(actor=reviewer, trajectory=three[0], choices=[])
    assert services.review_skip(actor=reviewer, trajectory=three[0]).state == ReviewState.REVIEWED
    assert AuditEvent.objects.filter(action="review.skip").count() == 2


# --- queues and claims ---------------------------------------------------------------------


def test_next_hands_out_the_oldest_unclaimed_item_and_a_reload_gets_the_same(three, reviewer, make_user):
    queue = services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    first = services.queue_next(queue=queue, reviewer=reviewer)
    assert first == three[0]
    assert services.queue_next(queue=queue, reviewer=reviewer) == three[0]
    assert services.queue_next(queue=queue, reviewer=make_user(Role.REVIEWER)) == three[1]
    assert services.queue_next(queue=queue, reviewer=make_user(Role.REVIEWER)) is None


def test_a_saved_item_leaves_the_queue_and_the_next_one_follows(three, reviewer):
    queue = services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    services.queue_next(queue=queue, reviewer=reviewer)
    services.review_submit(actor=reviewer, trajectory=three[0], choices=[])
    assert Review.objects.get(trajectory=three[0]).claimed_by is None
    assert services.queue_next(queue=queue, reviewer=reviewer) == three[1]


def test_an_expired_claim_comes_back_to_the_queue(three, reviewer, make_user):
    queue = services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    services.queue_next(queue=queue, reviewer=reviewer)
    Review.objects.filter(trajectory=three[0]).update(claimed_until=timezone.now() - timedelta(seconds=1))
    assert services.queue_next(queue=queue, reviewer=make_user(Role.REVIEWER)) == three[0]


def test_the_conditional_update_claim_gives_different_items_too(three, reviewer, make_user):
    queue = services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    candidates = services.selectors.queue_candidates(queue, viewer=reviewer)
    first = services._claim_conditional(candidates, reviewer)
    fresh = services.selectors.queue_candidates(queue, viewer=reviewer)
    second = services._claim_conditional(fresh, make_user(Role.REVIEWER))
    assert {first.trajectory, second.trajectory} == {three[0], three[1]}
    assert services._claim_conditional(services.selectors.queue_candidates(queue, viewer=reviewer), reviewer) is None


def test_only_assigned_reviewers_get_items_from_a_queue_with_reviewers(three, reviewer, make_user):
    queue = services.queue_create(actor=reviewer, name="rita's", filters=FAILURES, reviewers=[reviewer])
    with pytest.raises(PermissionDenied):
        services.queue_next(queue=queue, reviewer=make_user(Role.REVIEWER))
    with pytest.raises(PermissionDenied):
        services.queue_next(queue=make_queue_open(reviewer), reviewer=make_user(Role.VIEWER))
    assert services.queue_next(queue=queue, reviewer=reviewer) == three[0]


def make_queue_open(actor):
    return services.queue_create(actor=actor, name="open", filters=FAILURES)


def test_trajectories_ingested_without_reviews_still_reach_the_queue(three, reviewer):
    Review.objects.all().delete()
    queue = services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    assert services.queue_next(queue=queue, reviewer=reviewer) == three[0]


def test_a_queue_needs_a_valid_unique_name_and_is_audited(reviewer):
    services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    with pytest.raises(ValidationError):
        services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    assert AuditEvent.objects.get(action="queue.create").data == {
        "filters": {"outcome": "failure"},
        "rules": [],
        "reviewers": [],
    }


# --- bulk actions --------------------------------------------------------------------------


def test_bulk_assigning_a_bucket_skips_trajectories_that_have_it(three, reviewer):
    services.review_submit(actor=reviewer, trajectory=three[0], choices=[BucketChoice(bucket("wrong_tool"), 1)])
    changed = services.bucket_bulk_assign(
        actor=reviewer, bucket=bucket("wrong_tool"), trajectory_ids=[t.pk for t in three]
    )
    assert changed == 2
    assert BucketAssignment.objects.get(trajectory=three[0]).step_index == 1
    assert AuditEvent.objects.get(action="bucket.bulk_assign").data["changed"] == 2


def test_bulk_mark_reviewed_counts_only_changes(three, reviewer):
    services.review_submit(actor=reviewer, trajectory=three[0], choices=[])
    assert services.review_bulk_mark_reviewed(actor=reviewer, trajectory_ids=[t.pk for t in three]) == 2
    assert set(Review.objects.values_list("state", flat=True)) == {ReviewState.REVIEWED}


def test_adding_to_a_queue_by_hand_puts_non_matching_trajectories_in_it(three, reviewer):
    queue = services.queue_create(actor=reviewer, name="failures", filters=FAILURES)
    assert services.queue_items_add(actor=reviewer, queue=queue, trajectory_ids=[three[2].pk, three[2].pk]) == 1
    assert services.queue_items_add(actor=reviewer, queue=queue, trajectory_ids=[three[2].pk]) == 0
    assert QueueItem.objects.get().trajectory == three[2]
    assert set(services.selectors.queue_members(queue, viewer=reviewer)) == set(three)


# --- buckets and policies ------------------------------------------------------------------


def test_a_custom_bucket_gets_a_slug_and_can_be_deleted_while_unused(make_user):
    admin = make_user(Role.ADMIN)
    custom = services.bucket_create(actor=admin, name="Policy violation", colour="#123456")
    assert (custom.slug, custom.built_in) == ("policy_violation", False)
    services.bucket_delete(actor=admin, bucket=custom)
    assert not Bucket.objects.filter(slug="policy_violation").exists()
    assert [e.action for e in AuditEvent.objects.order_by("created_at")] == ["bucket.create", "bucket.delete"]


def test_a_built_in_bucket_is_never_deleted(make_user):
    with pytest.raises(ValidationError, match="built-in"):
        services.bucket_delete(actor=make_user(Role.ADMIN), bucket=bucket("format_error"))


def test_a_used_custom_bucket_is_not_deleted(three, make_user):
    admin = make_user(Role.ADMIN)
    custom = services.bucket_create(actor=admin, name="Rude")
    services.bucket_bulk_assign(actor=admin, bucket=custom, trajectory_ids=[three[0].pk])
    with pytest.raises(ValidationError, match="on 1 trajectories"):
        services.bucket_delete(actor=admin, bucket=custom)


def test_a_bad_colour_is_refused(make_user):
    with pytest.raises(ValidationError):
        services.bucket_create(actor=make_user(Role.ADMIN), name="Odd", colour="red")


def test_an_agent_policy_is_validated_stored_audited_and_recomputed(three, make_user, monkeypatch):
    admin = make_user(Role.ADMIN)
    shop = Agent.objects.get(name="shop")
    with pytest.raises(ValidationError, match="unexpected keyword"):
        services.agent_policy_set(actor=admin, agent=shop, policy={"filter_rules": [{"x": 1}]})
    with pytest.raises(ValidationError):
        services.agent_policy_set(actor=admin, agent=shop, policy={"argument_patterns": [{"id": "r", "pattern": "("}]})
    queued = []
    monkeypatch.setattr("flywheel.triage.tasks.recompute_agent_suggestions.delay_on_commit", queued.append)
    services.agent_policy_set(actor=admin, agent=shop, policy={"name": "strict", "denied_tools": ["refund_*"]})
    assert AgentPolicy.objects.get(agent=shop).policy["name"] == "strict"
    assert AuditEvent.objects.get(action="agent_policy.set").data["policy"]["denied_tools"] == ["refund_*"]
    assert queued == [str(shop.pk)]
    tasks.recompute_agent_suggestions(str(shop.pk))
    assert Suggestion.objects.filter(trajectory=three[0], rule="safety/denied-tool").exists()
    services.agent_policy_clear(actor=admin, agent=shop)
    tasks.recompute_agent_suggestions(str(shop.pk))
    assert not Suggestion.objects.filter(rule="safety/denied-tool").exists()
