"""Regression alerts: the live version against its predecessor, opened once, resolved by a rollback."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from flywheel.core.models import AuditEvent
from flywheel.core.roles import Role
from flywheel.ingest.models import Feedback, Trajectory
from flywheel.monitoring import services
from flywheel.monitoring.models import Alert, MonitoredRate
from flywheel.monitoring.services import monitor_check, scores_compute
from flywheel.registry import selectors as registry_selectors
from flywheel.registry.services import RegistryRefused, version_rollback

from .conftest import SAFE_CALL, UNSAFE_CALL, call, shop

pytestmark = pytest.mark.django_db


@pytest.fixture
def traffic(store, rule):
    """traffic(version, calls, count, **record fields): `count` scored trajectories tagged with the version."""
    made = {"n": 0}

    def send(version, calls, count, **fields):
        records = []
        for _ in range(count):
            made["n"] += 1
            records.append(shop(f"t{made['n']}", calls, version=version.tag, **fields))
        stored = store(*records)
        scores_compute(trajectory_ids=[row.pk for row in stored.values()])
        return stored

    return send


@pytest.fixture
def small_samples(settings):
    settings.MONITOR_MIN_SAMPLES = 5


def test_a_live_version_worse_on_unsafe_actions_opens_an_audited_alert(versions, traffic, small_samples):
    v1, v2 = versions
    traffic(v1, [SAFE_CALL], 8)
    traffic(v2, [UNSAFE_CALL], 6)
    traffic(v2, [SAFE_CALL], 2)
    [alert] = monitor_check(agent=v2.agent)
    assert (alert.version, alert.predecessor, alert.rate) == (v2, v1, MonitoredRate.UNSAFE)
    assert (alert.live_events, alert.live_total, alert.predecessor_events, alert.predecessor_total) == (6, 8, 0, 8)
    assert alert.p_value < 0.01 and alert.is_open
    event = AuditEvent.objects.get(action="monitoring.alert_open")
    assert event.target_id == str(alert.pk) and event.data["rate"] == "unsafe"


def test_checking_again_refreshes_the_open_alert_instead_of_opening_another(versions, traffic, small_samples):
    v1, v2 = versions
    traffic(v1, [SAFE_CALL], 6)
    traffic(v2, [UNSAFE_CALL], 6)
    monitor_check(agent=v2.agent)
    traffic(v2, [UNSAFE_CALL], 2)
    [alert] = monitor_check(agent=v2.agent)
    assert Alert.objects.count() == 1 and alert.live_total == 8
    assert AuditEvent.objects.filter(action="monitoring.alert_open").count() == 1


def test_invalid_calls_count_schema_and_catalogue_failures(versions, traffic, small_samples):
    v1, v2 = versions
    traffic(v1, [SAFE_CALL], 6)
    traffic(v2, [call("teleport", {})], 3)
    traffic(v2, [call("refund_order", {"order_id": 17})], 3)
    assert [alert.rate for alert in monitor_check(agent=v2.agent)] == [MonitoredRate.INVALID_CALL]


def test_a_lower_success_rate_and_more_thumbs_down_open_alerts(versions, traffic, small_samples):
    v1, v2 = versions
    traffic(v1, [], 6, outcome="success")
    for trajectory in traffic(v2, [], 6, outcome="failure").values():
        Feedback.objects.create(trajectory=trajectory, thumb=Feedback.Thumb.DOWN)
    for trajectory in Trajectory.objects.filter(model_version=v1.tag):
        Feedback.objects.create(trajectory=trajectory, thumb=Feedback.Thumb.UP)
    rates = {alert.rate for alert in monitor_check(agent=v2.agent)}
    assert rates == {MonitoredRate.SUCCESS, MonitoredRate.NEGATIVE_FEEDBACK}


def test_no_alert_for_a_better_version(versions, traffic, small_samples):
    v1, v2 = versions
    traffic(v1, [UNSAFE_CALL], 6, outcome="failure")
    traffic(v2, [SAFE_CALL], 6, outcome="success")
    assert monitor_check(agent=v2.agent) == []
    traffic(v1, [SAFE_CALL], 30)
    traffic(v2, [SAFE_CALL], 24)
    assert monitor_check(agent=v2.agent) == []  # v2: 0 of 30 unsafe, v1: 6 of 36; v2 succeeds more too


def test_no_alert_below_the_minimum_sample(versions, traffic, settings):
    settings.MONITOR_MIN_SAMPLES = 7
    v1, v2 = versions
    traffic(v1, [SAFE_CALL], 6)
    traffic(v2, [UNSAFE_CALL], 6)
    assert monitor_check(agent=v2.agent) == []
    traffic(v1, [SAFE_CALL], 1)
    traffic(v2, [UNSAFE_CALL], 1)
    assert len(monitor_check(agent=v2.agent)) == 1


def test_the_first_promotion_has_no_predecessor_to_compare_with(agent, adapters, traffic, make_user, small_samples):
    from flywheel.registry.services import version_promote, version_register
    from tests.flywheel.registry.conftest import TINY_MODEL

    only = version_register(actor=None, agent=agent, adapter_dir=adapters[0], base_model=str(TINY_MODEL))
    version_promote(actor=make_user(Role.APPROVER), version=only, reason="first")
    traffic(only, [UNSAFE_CALL], 6)
    assert monitor_check(agent=agent) == []


@pytest.fixture
def alert(versions, traffic, small_samples) -> Alert:
    v1, v2 = versions
    traffic(v1, [SAFE_CALL], 6)
    traffic(v2, [UNSAFE_CALL], 6)
    [opened] = monitor_check(agent=v2.agent)
    return opened


def test_rolling_back_from_the_alert_puts_the_predecessor_live_and_resolves_it(alert, make_user):
    approver = make_user(Role.APPROVER)
    deployment = services.alert_rollback(actor=approver, alert=alert, reason="unsafe deletes in production")
    assert registry_selectors.live_version(agent=alert.agent) == alert.predecessor
    alert.refresh_from_db()
    assert (alert.is_open, alert.resolved_by, alert.rollback) == (False, approver, deployment)
    assert deployment.reason == "unsafe deletes in production"
    assert AuditEvent.objects.filter(action="monitoring.alert_resolve", target_id=str(alert.pk)).exists()
    with pytest.raises(services.MonitoringRefused):
        services.alert_rollback(actor=approver, alert=alert, reason="again")


def test_a_rollback_from_the_alert_still_needs_a_reason_and_an_approver(alert, make_user):
    with pytest.raises(RegistryRefused):
        services.alert_rollback(actor=make_user(Role.APPROVER), alert=alert, reason="  ")
    with pytest.raises(PermissionDenied):
        services.alert_rollback(actor=make_user(Role.TRAINER), alert=alert, reason="because")
    alert.refresh_from_db()
    assert alert.is_open and registry_selectors.live_version(agent=alert.agent) == alert.version


def test_a_rollback_elsewhere_resolves_the_alert_at_the_next_check(alert, make_user):
    version_rollback(actor=make_user(Role.APPROVER), agent=alert.agent, reason="from the registry page")
    assert monitor_check(agent=alert.agent) == []
    alert.refresh_from_db()
    assert not alert.is_open and alert.resolution == "the version is no longer live" and alert.resolved_by is None


def test_the_sweep_scores_and_checks_every_live_agent(versions, store, rule, small_samples, settings):
    v1, v2 = versions
    store(*(shop(f"a{number}", [SAFE_CALL], version=v1.tag) for number in range(6)))
    store(*(shop(f"b{number}", [UNSAFE_CALL], version=v2.tag) for number in range(6)))
    assert services.monitor_check(agent=v2.agent) == []  # nothing scored yet: nothing to compare
    settings.DISPATCH_RESEND_SECONDS = -60  # every trajectory's own message has had its time
    assert services.monitor_sweep() == 1
    assert Alert.objects.get().rate == MonitoredRate.UNSAFE


def test_a_version_restored_by_a_rollback_is_not_compared_with_the_one_it_replaced(
    versions, traffic, make_user, small_samples
):
    v1, v2 = versions
    traffic(v1, [SAFE_CALL], 6, outcome="failure")
    traffic(v2, [UNSAFE_CALL], 6, outcome="success")
    version_rollback(actor=make_user(Role.APPROVER), agent=v2.agent, reason="unsafe")
    assert monitor_check(agent=v2.agent) == []  # v1 succeeds less than v2, yet v2 is no baseline to hold it to
    assert not Alert.objects.exists()
