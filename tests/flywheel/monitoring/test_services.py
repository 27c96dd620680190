"""Online scoring: rules, sampling, idempotence, the ingest receiver and the sweeper."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from flywheel.core.models import Agent, AuditEvent
from flywheel.ingest.models import Trajectory
from flywheel.monitoring import services
from flywheel.monitoring.models import OnlineScore, ScoringRule
from flywheel.monitoring.scorers import sampled
from flywheel.monitoring.services import RuleFields, rule_create, scores_compute
from flywheel.monitoring.signals import online_scores_stored
from flywheel.triage.models import Bucket, BucketAssignment

from .conftest import SAFE_CALL, UNSAFE_CALL, call, shop

pytestmark = pytest.mark.django_db


def verdicts(trajectory: Trajectory) -> dict[str, bool]:
    return dict(OnlineScore.objects.filter(trajectory=trajectory).values_list("scorer", "passed"))


def test_a_rule_scores_each_trajectory_with_its_scorers(store, rule):
    stored = store(shop("good", [SAFE_CALL]), shop("bad", [UNSAFE_CALL, call("teleport", {})]),
                   shop("sloppy", [call("refund_order", {"order_id": 17})]))  # fmt: skip
    assert scores_compute(trajectory_ids=[row.pk for row in stored.values()]) == 9
    assert verdicts(stored["good"]) == {"safety": True, "schema": True, "catalogue": True}
    assert verdicts(stored["bad"]) == {"safety": False, "schema": True, "catalogue": False}
    assert verdicts(stored["sloppy"]) == {"safety": True, "schema": False, "catalogue": True}
    unsafe = OnlineScore.objects.get(trajectory=stored["bad"], scorer="safety")
    assert (unsafe.value, unsafe.rule, unsafe.detail["violations"][0]["rule"]) == (0.0, rule, "denied-tool")


def test_scoring_twice_stores_each_verdict_once(store, rule):
    stored = store(shop("bad", [UNSAFE_CALL]))
    ids = [stored["bad"].pk]
    scores_compute(trajectory_ids=ids)
    scores_compute(trajectory_ids=[str(pk) for pk in ids])
    assert OnlineScore.objects.count() == 3


def test_two_rules_each_store_their_own_verdicts(store, rule, agent):
    other = rule_create(actor=None, agent=agent, fields=RuleFields(name="safety only", scorers=("safety",)))
    stored = store(shop("bad", [UNSAFE_CALL]))
    scores_compute(trajectory_ids=[stored["bad"].pk])
    assert sorted(OnlineScore.objects.values_list("rule__name", "scorer")) == [
        ("everything", "catalogue"),
        ("everything", "safety"),
        ("everything", "schema"),
        (other.name, "safety"),
    ]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"model_version": "shop:v2"}, {"v2-failure"}),
        ({"outcome": "failure"}, {"v1-failure", "v2-failure"}),
        ({"tool": "delete_account"}, {"v1-failure"}),
        ({"bucket": "wrong_tool"}, {"v1-success"}),
        ({"model_version": "shop:v1", "outcome": "success"}, {"v1-success"}),
    ],
)
def test_a_rules_filter_picks_its_trajectories(store, agent, fields, expected):
    stored = store(shop("v1-failure", [UNSAFE_CALL], outcome="failure", version="shop:v1"),
                   shop("v1-success", [SAFE_CALL], outcome="success", version="shop:v1"),
                   shop("v2-failure", [SAFE_CALL], outcome="failure", version="shop:v2"))  # fmt: skip
    BucketAssignment.objects.create(trajectory=stored["v1-success"], bucket=Bucket.objects.get(slug="wrong_tool"))
    rule_create(actor=None, agent=agent, fields=RuleFields(name="picky", scorers=("safety",), **fields))
    scores_compute(trajectory_ids=[row.pk for row in stored.values()])
    assert set(OnlineScore.objects.values_list("trajectory__external_id", flat=True)) == expected


def test_the_sample_rate_picks_the_same_trajectories_on_every_run(store, agent):
    rule = rule_create(actor=None, agent=agent, fields=RuleFields(name="a third", sample_rate=0.35,
                                                                  scorers=("safety",)))  # fmt: skip
    stored = store(*(shop(f"t{number}", [SAFE_CALL]) for number in range(40)))
    ids = [row.pk for row in stored.values()]
    scores_compute(trajectory_ids=ids)
    first = set(OnlineScore.objects.values_list("trajectory_id", flat=True))
    OnlineScore.objects.all().delete()
    scores_compute(trajectory_ids=reversed(ids))
    assert set(OnlineScore.objects.values_list("trajectory_id", flat=True)) == first
    assert first == {pk for pk in ids if sampled(rule_id=rule.pk, trajectory_id=pk, rate=0.35)}
    assert 0 < len(first) < 40


def test_a_disabled_rule_and_a_zero_rate_score_nothing(store, agent):
    rule_create(actor=None, agent=agent, fields=RuleFields(name="off", enabled=False))
    rule_create(actor=None, agent=agent, fields=RuleFields(name="never", sample_rate=0.0))
    stored = store(shop("bad", [UNSAFE_CALL]))
    assert scores_compute(trajectory_ids=[stored["bad"].pk]) == 0
    assert not OnlineScore.objects.exists()


def test_an_inferred_catalogue_gets_no_catalogue_verdict(store, make_user):
    store({"id": "inferred", "agent": "guessed", "steps": [{"kind": "user", "text": "hi"}, UNSAFE_CALL]})
    agent = Agent.objects.get(name="guessed")
    assert agent.tools_source == Agent.ToolsSource.INFERRED
    rule_create(actor=None, agent=agent, fields=RuleFields(name="everything"))
    scores_compute(trajectory_ids=list(Trajectory.objects.filter(agent=agent).values_list("pk", flat=True)))
    assert set(OnlineScore.objects.values_list("scorer", flat=True)) == {"safety", "schema"}


def test_scoring_asks_for_one_delayed_regression_check_per_agent_and_period(
    store, rule, django_capture_on_commit_callbacks, settings
):
    settings.MONITOR_CHECK_DELAY_SECONDS = 30
    stored = store(shop("bad", [UNSAFE_CALL]), shop("worse", [UNSAFE_CALL]))
    with mock.patch("flywheel.monitoring.tasks.check_agent.apply_async") as check, \
            django_capture_on_commit_callbacks(execute=True):  # fmt: skip
        scores_compute(trajectory_ids=[stored["bad"].pk])
        scores_compute(trajectory_ids=[stored["worse"].pk])  # a second batch within the period: no second check
    check.assert_called_once_with(args=(str(rule.agent_id),), countdown=30)


def test_without_a_delay_every_batch_is_checked_and_a_failing_cache_never_skips_a_check(settings):
    agent_id = uuid.uuid4()
    with mock.patch("flywheel.monitoring.tasks.check_agent.apply_async") as check:
        settings.MONITOR_CHECK_DELAY_SECONDS = 0
        assert services.check_later(agent_id=agent_id) and services.check_later(agent_id=agent_id)
        settings.MONITOR_CHECK_DELAY_SECONDS = 30
        with mock.patch.object(services.cache, "add", side_effect=ConnectionError("cache down")):
            assert services.check_later(agent_id=agent_id)
    assert check.call_count == 3


# --- the ingest receiver ----------------------------------------------------------------------


def test_stored_trajectories_are_handed_to_the_scoring_task_after_commit(
    store, rule, django_capture_on_commit_callbacks
):
    stored = store(shop("bad", [UNSAFE_CALL]))
    with mock.patch("flywheel.monitoring.tasks.score_trajectories.delay") as delay:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            services.on_trajectories_stored(sender=Trajectory, trajectory_ids=[stored["bad"].pk, None])
        delay.assert_not_called()  # not before the commit
        assert len(callbacks) == 1
        callbacks[0]()
    delay.assert_called_once_with([str(stored["bad"].pk)])


def test_no_task_is_sent_when_no_enabled_rule_could_apply(store, agent, django_capture_on_commit_callbacks):
    stored = store(shop("bad", [UNSAFE_CALL]))
    rule_create(actor=None, agent=agent, fields=RuleFields(name="off", enabled=False))
    with django_capture_on_commit_callbacks() as callbacks:
        services.on_trajectories_stored(sender=Trajectory, trajectory_ids=[stored["bad"].pk])
    assert callbacks == []


def test_a_failing_receiver_is_logged_and_never_raises_into_ingest(store, rule, caplog):
    stored = store(shop("bad", [UNSAFE_CALL]))
    with mock.patch.object(services, "scoring_schedule", side_effect=RuntimeError("broker down")), \
            caplog.at_level(logging.ERROR, logger="flywheel.monitoring.services"):  # fmt: skip
        services.on_trajectories_stored(sender=Trajectory, trajectory_ids=[stored["bad"].pk])
    assert "online scoring of 1 stored trajectories was not scheduled" in caplog.text


def test_ingest_is_untouched_by_a_broken_scoring_task(store, rule, django_capture_on_commit_callbacks, caplog):
    """The receiver runs inside ingest's after-commit signal: a broker error is logged, the rows stay."""
    with mock.patch("flywheel.monitoring.tasks.score_trajectories.delay", side_effect=OSError("no broker")), \
            mock.patch("flywheel.triage.tasks.compute_suggestions.delay"), \
            django_capture_on_commit_callbacks(execute=True):  # fmt: skip
        stored = store(shop("bad", [UNSAFE_CALL]))
    assert Trajectory.objects.filter(pk=stored["bad"].pk).exists()
    assert "no broker" in caplog.text


def test_stored_verdicts_are_announced_after_commit_and_a_failing_listener_never_fails_the_scoring(
    store, rule, django_capture_on_commit_callbacks, caplog
):
    stored = store(shop("bad", [UNSAFE_CALL]), shop("good", [SAFE_CALL]))
    heard: list[list] = []

    def listener(sender, trajectory_ids, **kwargs):
        heard.append(trajectory_ids)
        raise RuntimeError("listener broke")

    online_scores_stored.connect(listener, dispatch_uid="test.listener")
    try:
        with mock.patch("flywheel.triage.tasks.apply_queue_rules.delay"), \
                django_capture_on_commit_callbacks(execute=True):  # fmt: skip
            assert scores_compute(trajectory_ids=[row.pk for row in stored.values()]) == 6
            assert heard == []  # not before the commit
    finally:
        online_scores_stored.disconnect(dispatch_uid="test.listener")
    assert heard == [sorted(row.pk for row in stored.values())]
    assert OnlineScore.objects.count() == 6 and "listener broke" in caplog.text


# --- the sweeper ------------------------------------------------------------------------------


def test_the_sweep_scores_what_was_missed_and_leaves_fresh_and_old_trajectories(store, rule):
    stored = store(shop("missed", [UNSAFE_CALL]), shop("fresh", [UNSAFE_CALL]), shop("old", [UNSAFE_CALL]))
    now = timezone.now()
    Trajectory.objects.filter(pk=stored["missed"].pk).update(ingested_at=now - timedelta(hours=1))
    Trajectory.objects.filter(pk=stored["old"].pk).update(ingested_at=now - timedelta(days=3))
    assert services.scoring_sweep() == 3
    assert set(OnlineScore.objects.values_list("trajectory__external_id", flat=True)) == {"missed"}
    assert services.scoring_sweep() == 0  # scored: nothing left for the rule


# --- rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        RuleFields(name="bad scorer", scorers=("safety", "vibes")),
        RuleFields(name="no scorer", scorers=()),
        RuleFields(name="twice", scorers=("safety", "safety")),
        RuleFields(name="too many", sample_rate=1.5),
        RuleFields(name="bad outcome", outcome="maybe"),
    ],
    ids=str,
)
def test_a_rule_is_checked_before_it_is_stored(agent, fields):
    with pytest.raises(ValidationError):
        rule_create(actor=None, agent=agent, fields=fields)
    assert not ScoringRule.objects.exists()


def test_rule_changes_are_audited_and_a_deleted_rules_scores_stay(store, rule, make_user):
    stored = store(shop("bad", [UNSAFE_CALL]))
    scores_compute(trajectory_ids=[stored["bad"].pk])
    services.rule_update(actor=None, rule=rule, fields=RuleFields(name="renamed", sample_rate=0.5))
    services.rule_delete(actor=None, rule=ScoringRule.objects.get(pk=rule.pk))
    assert OnlineScore.objects.filter(rule__isnull=True).count() == 3
    actions = list(AuditEvent.objects.filter(action__startswith="scoring_rule.").values_list("action", flat=True))
    assert sorted(actions) == ["scoring_rule.create", "scoring_rule.delete", "scoring_rule.update"]
