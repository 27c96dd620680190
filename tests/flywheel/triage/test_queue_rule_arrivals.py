"""Queues that fill themselves: `services.queue_rules_apply` on stored rows, the arrival paths that call it
(the ingestion API, feedback), the tombstone a removal leaves, and a real worker doing it all."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import Trajectory
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.ingest.services import feedback_add
from flywheel.monitoring.models import OnlineScore
from flywheel.monitoring.services import RuleFields, rule_create, scores_compute
from flywheel.triage import selectors, services, tasks
from flywheel.triage.models import Queue, QueueItem
from flywheel.triage.queue_rules import rules_parse
from flywheel.triage.selectors import TriageFilters
from tests.flywheel.triage.conftest import call, shop_record, user

pytestmark = pytest.mark.django_db
HAND_ONLY = TriageFilters()


@pytest.fixture
def owner(make_user):
    return make_user(Role.REVIEWER, "rita")


def make_queue(owner, name: str, rules: list[dict], filters: TriageFilters = HAND_ONLY) -> Queue:
    return services.queue_create(actor=owner, name=name, filters=filters, rules=rules_parse(rules))


def items(queue: Queue) -> dict[str, str]:
    """External id -> the rule that added it, of the queue's items (tombstones included)."""
    rows = QueueItem.objects.filter(queue=queue).values_list("trajectory__external_id", "rule")
    return dict(rows)


def members(queue: Queue, viewer) -> set[str]:
    return set(selectors.queue_members(queue, viewer=viewer).values_list("external_id", flat=True))


@pytest.fixture
def arrivals(store, owner) -> dict[str, Trajectory]:
    """Six shop trajectories: versions v3, v31 and v2, one suggested format_error, one successful."""
    stored = store(
        shop_record("v3", [user()], model_version="shop:v3"),
        shop_record("v31", [user()], model_version="shop:v31"),
        shop_record("v2", [user()], model_version="shop:v2"),
        shop_record("args", [user(), call("refund_order", {"order_id": "1"})], model_version="shop:v2"),
        shop_record("ok", [user()], outcome="success", model_version="shop:v2"),
        shop_record("scored", [user()], model_version="shop:v2"),
    )
    feedback_add(trajectory=stored["v3"], value="down", sent_by=owner)
    feedback_add(trajectory=stored["v2"], value="up", sent_by=owner)
    feedback_add(trajectory=stored["scored"], value=0.2, sent_by=owner)
    feedback_add(trajectory=stored["ok"], value=0.7, sent_by=owner)
    return stored


def apply(stored: dict[str, Trajectory]) -> int:
    return services.queue_rules_apply(trajectory_ids=[t.pk for t in stored.values()])


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"outcome": "success"}, {"ok"}),
        ({"model_version": "shop:v3"}, {"v3"}),
        ({"model_version": "shop:v3*"}, {"v3", "v31"}),
        ({"suggested_bucket": ["format_error"]}, {"args"}),
        ({"suggested_bucket": ["needs-review"], "model_version": "shop:v3*"}, {"v3", "v31"}),
        ({"negative_feedback": True}, {"v3"}),
        ({"negative_feedback": {"thumbs_down": False, "score_below": 0.5}}, {"scored"}),
        ({"negative_feedback": {"score_below": 0.8}}, {"v3", "scored", "ok"}),
        ({"outcome": "failure", "negative_feedback": {"score_below": 0.8}}, {"v3", "scored"}),
    ],
)
def test_a_rule_of_each_kind_takes_in_what_it_matches_and_nothing_else(owner, arrivals, rule, expected):
    queue = make_queue(owner, "ruled", [{"name": "the rule", **rule}])
    assert apply(arrivals) == len(expected)
    assert items(queue) == dict.fromkeys(expected, "the rule")
    assert set(QueueItem.objects.values_list("source", flat=True)) == {QueueItem.Source.RULE}
    assert members(queue, owner) == expected


def test_applying_twice_adds_nothing_twice_and_each_queue_keeps_its_own(owner, arrivals):
    thumbs = make_queue(owner, "thumbs", [{"name": "down", "negative_feedback": True}])
    versions = make_queue(owner, "versions", [{"name": "v3 line", "model_version": "shop:v3*"},
                                              {"name": "thumbs too", "negative_feedback": True}])  # fmt: skip
    assert apply(arrivals) == 3
    assert apply(arrivals) == 0
    assert items(thumbs) == {"v3": "down"}
    assert items(versions) == {"v3": "v3 line", "v31": "v3 line"}  # the first matching rule is recorded
    assert QueueItem.objects.count() == 3


def test_a_queue_whose_filter_names_an_agent_takes_in_only_that_agents_trajectories(owner, store):
    stored = store(shop_record("shop-run", [user()]), {**shop_record("other-run", [user()]), "agent": "other"})
    queue = make_queue(owner, "shop only", [{"name": "failures", "outcome": "failure"}],
                       filters=TriageFilters(base=TrajectoryFilters(agent="shop"), bucket="wrong_tool"))  # fmt: skip
    apply(stored)
    assert items(queue) == {"shop-run": "failures"}


def test_rules_naming_a_bucket_that_does_not_exist_are_refused(owner):
    with pytest.raises(ValidationError, match="no bucket there is: 'wrong_tools'"):
        make_queue(owner, "typo", [{"name": "r", "suggested_bucket": ["wrong_tools"]}])
    assert not Queue.objects.filter(name="typo").exists()


def test_without_any_ruled_queue_nothing_is_read(owner, arrivals, django_assert_num_queries):
    make_queue(owner, "no rules", [], filters=TriageFilters(base=TrajectoryFilters(outcome="failure")))
    with django_assert_num_queries(1):
        assert apply(arrivals) == 0


# --- removed never comes back ----------------------------------------------------------------


def test_an_item_a_reviewer_removed_never_comes_back(owner, arrivals):
    queue = make_queue(owner, "thumbs", [{"name": "down", "negative_feedback": True}])
    apply(arrivals)
    removed = services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["v3"])
    assert (removed.removed_by, removed.source, removed.rule) == (owner, QueueItem.Source.RULE, "down")
    for _ in range(2):
        assert apply(arrivals) == 0
        feedback_add(trajectory=arrivals["v3"], value="down", sent_by=owner)  # a new signal for it
    assert members(queue, owner) == set()
    assert QueueItem.objects.get(queue=queue).removed_at is not None
    assert selectors.queue_progress(queue, viewer=owner).total == 0
    assert services.queue_next(queue=queue, reviewer=owner) is None


def test_a_removed_trajectory_does_not_show_through_the_filter(owner, arrivals):
    queue = make_queue(owner, "failures", [{"name": "down", "negative_feedback": True}],
                       filters=TriageFilters(base=TrajectoryFilters(outcome="failure")))  # fmt: skip
    assert members(queue, owner) == {"v3", "v31", "v2", "args", "scored"}
    services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["args"])  # the filter's only
    services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["v2"])
    apply(arrivals)
    assert members(queue, owner) == {"v3", "v31", "scored"}
    assert QueueItem.objects.get(queue=queue, trajectory=arrivals["args"]).source == QueueItem.Source.FILTER
    candidates = selectors.queue_candidates_first(queue, viewer=owner, limit=100)
    assert {review.trajectory.external_id for review in candidates} <= {"v3", "v31", "scored"}


def test_removing_twice_changes_nothing_and_a_non_member_cannot_be_removed(owner, arrivals):
    queue = make_queue(owner, "thumbs", [{"name": "down", "negative_feedback": True}])
    apply(arrivals)
    first = services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["v3"])
    again = services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["v3"])
    assert (again.pk, again.removed_at) == (first.pk, first.removed_at)
    with pytest.raises(ValidationError, match="is not in queue thumbs"):
        services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["ok"])
    assert QueueItem.objects.filter(queue=queue).count() == 1


def test_a_person_adding_a_removed_trajectory_by_hand_puts_it_back(owner, arrivals):
    queue = make_queue(owner, "thumbs", [{"name": "down", "negative_feedback": True}])
    apply(arrivals)
    services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["v3"])
    assert services.queue_items_add(actor=owner, queue=queue, trajectory_ids=[arrivals["v3"].pk]) == 1
    item = QueueItem.objects.get(queue=queue)
    assert (item.source, item.rule, item.removed_at, item.added_by) == (QueueItem.Source.HAND, "", None, owner)
    assert members(queue, owner) == {"v3"}


# --- the arrival paths -----------------------------------------------------------------------


@pytest.fixture
def run_tasks_now(monkeypatch) -> list[str]:
    """Run the triage tasks in place of sending them; the names sent, in order."""
    sent: list[str] = []
    for name in ("compute_suggestions", "apply_queue_rules"):
        task = getattr(tasks, name)
        monkeypatch.setattr(task, "delay", lambda ids, task=task, name=name: (sent.append(name), task(ids)))
    return sent


def bearer(make_user) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=make_user(Role.REVIEWER), name='product')[1]}"}


def test_a_trajectory_posted_to_the_api_joins_a_queue_on_its_suggested_bucket(
    client, make_user, owner, run_tasks_now, django_capture_on_commit_callbacks
):
    queue = make_queue(owner, "format errors", [{"name": "bad args", "suggested_bucket": ["format_error"]}])
    body = json.dumps({"batch": [shop_record("api-args", [user(), call("refund_order", {"order_id": "1"})]),
                                 shop_record("api-fine", [user()])]})  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("ingest:api_trajectories"), body, content_type="application/json",
                               **bearer(make_user))  # fmt: skip
    assert response.status_code == 207
    assert run_tasks_now == ["compute_suggestions"]  # suggestions, then the rules that read them, in one task
    assert items(queue) == {"api-args": "bad args"}


def test_feedback_posted_to_the_api_brings_its_trajectory_into_a_queue(
    client, make_user, owner, store, run_tasks_now, django_capture_on_commit_callbacks
):
    queue = make_queue(owner, "unhappy users", [{"name": "low score", "negative_feedback": {"score_below": 0.5}}])
    trajectory = store(shop_record("chat-1", [user()], outcome="unknown"))["chat-1"]
    services.queue_rules_apply(trajectory_ids=[trajectory.pk])
    assert items(queue) == {}
    url = reverse("ingest:api_feedback", args=[trajectory.pk])
    headers = bearer(make_user)
    for value in (0.9, 0.1):
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(url, json.dumps({"value": value}), content_type="application/json", **headers)
        assert response.status_code == 201
    assert run_tasks_now == ["apply_queue_rules", "apply_queue_rules"]
    assert items(queue) == {"chat-1": "low score"}


def test_a_broker_failure_never_fails_the_feedback(client, make_user, store, monkeypatch, caplog,
                                                   django_capture_on_commit_callbacks):  # fmt: skip
    def unreachable(ids):
        raise ConnectionError("broker down")

    monkeypatch.setattr(tasks.apply_queue_rules, "delay", unreachable)
    trajectory = store(shop_record("chat-2", [user()]))["chat-2"]
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("ingest:api_feedback", args=[trajectory.pk]), json.dumps({"value": "down"}),
                               content_type="application/json", **bearer(make_user))  # fmt: skip
    assert response.status_code == 201 and "broker down" in caplog.text


# --- online scores arrive later --------------------------------------------------------------

BAD_CALLS = {"name": "bad calls", "online_score_below": {"scorer": "schema", "below": 1}}


@pytest.fixture
def schema_scoring(arrivals) -> Callable[[], int]:
    """A monitoring rule scoring the shop agent's calls against their schemas; calling it scores the arrivals
    (as the monitoring task does), running the tasks its signal sends in place."""
    rule_create(actor=None, agent=Agent.objects.get(name="shop"), fields=RuleFields(name="calls", scorers=("schema",)))
    return lambda: scores_compute(trajectory_ids=[t.pk for t in arrivals.values()])


def test_a_trajectory_joins_its_queue_once_monitoring_scores_it_below_the_threshold(
    owner, arrivals, schema_scoring, run_tasks_now, django_capture_on_commit_callbacks
):
    queue = make_queue(owner, "invalid calls", [BAD_CALLS])
    assert apply(arrivals) == 0  # not scored yet: no online score to compare
    with django_capture_on_commit_callbacks(execute=True):
        assert schema_scoring() == 6  # one verdict per trajectory; only `args` calls refund_order without amount
    assert run_tasks_now == ["apply_queue_rules"]
    assert items(queue) == {"args": "bad calls"}
    assert members(queue, owner) == {"args"}


def test_an_item_removed_after_its_online_score_never_comes_back(
    owner, arrivals, schema_scoring, run_tasks_now, django_capture_on_commit_callbacks
):
    queue = make_queue(owner, "invalid calls", [BAD_CALLS])
    with django_capture_on_commit_callbacks(execute=True):
        schema_scoring()
    services.queue_item_remove(actor=owner, queue=queue, trajectory=arrivals["args"])
    rule_create(actor=None, agent=Agent.objects.get(name="shop"), fields=RuleFields(name="again", scorers=("schema",)))
    with django_capture_on_commit_callbacks(execute=True):
        schema_scoring()  # a second rule's verdicts: the signal offers `args` to the rules again
    assert OnlineScore.objects.filter(trajectory=arrivals["args"], passed=False).count() == 2
    assert run_tasks_now == ["apply_queue_rules", "apply_queue_rules"]
    assert members(queue, owner) == set()
    assert QueueItem.objects.get(queue=queue).removed_at is not None


def test_the_lowest_online_score_of_a_scorer_is_the_one_compared(owner, arrivals):
    """Two scoring rules may score one trajectory; a judge-like scorer may give any value."""
    queue = make_queue(owner, "low", [{"name": "low", "online_score_below": {"scorer": "safety", "below": 0.5}}])
    for name, value in (("a", 0.9), ("b", 0.3)):
        scoring = rule_create(actor=None, agent=arrivals["v2"].agent, fields=RuleFields(name=name))
        OnlineScore.objects.create(trajectory=arrivals["v2"], rule=scoring, scorer="safety", value=value,
                                   passed=value >= 0.5)  # fmt: skip
    OnlineScore.objects.create(trajectory=arrivals["v3"], scorer="schema", value=0.0, passed=False)
    assert apply(arrivals) == 1
    assert items(queue) == {"v2": "low"}


def test_rules_of_a_hand_edited_row_that_do_not_parse_are_skipped_and_logged(owner, arrivals, caplog):
    good = make_queue(owner, "good", [{"name": "down", "negative_feedback": True}])
    make_queue(owner, "bad", [{"name": "ok", "outcome": "failure"}])
    Queue.objects.filter(name="bad").update(rules=[{"name": "broken", "outcome": "nope"}])
    apply(arrivals)
    assert items(good) == {"v3": "down"} and "do not parse" in caplog.text


# --- a real worker ---------------------------------------------------------------------------


def wait_for(condition, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(0.3)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("built_in_buckets")
def test_a_worker_files_an_api_trajectory_and_later_feedback_into_their_queues(client, make_user, owner,
                                                                              celery_worker_process):  # fmt: skip
    celery_worker_process("default")
    by_bucket = make_queue(owner, "format errors", [{"name": "bad args", "suggested_bucket": ["format_error"]}])
    by_thumb = make_queue(owner, "thumbs down", [{"name": "down", "negative_feedback": True}])
    headers = bearer(make_user)
    body = json.dumps({"batch": [shop_record("live-1", [user(), call("refund_order", {"order_id": "1"})])]})
    response = client.post(reverse("ingest:api_trajectories"), body, content_type="application/json", **headers)
    assert response.status_code == 207, response.content
    wait_for(lambda: QueueItem.objects.filter(queue=by_bucket).exists())
    assert items(by_bucket) == {"live-1": "bad args"} and items(by_thumb) == {}
    trajectory = Trajectory.objects.get(external_id="live-1")
    url = reverse("ingest:api_feedback", args=[trajectory.pk])
    feedback = client.post(url, json.dumps({"value": "down"}), content_type="application/json", **headers)
    assert feedback.status_code == 201
    wait_for(lambda: QueueItem.objects.filter(queue=by_thumb).exists())
    assert items(by_thumb) == {"live-1": "down"}
    assert members(by_bucket, owner) == members(by_thumb, owner) == {"live-1"}
