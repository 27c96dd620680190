"""The monitoring pages, the home page's alerts with their rollback, and scores in the trace viewer."""

from __future__ import annotations

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.ingest.models import Feedback
from flywheel.monitoring.models import Alert, ScoringRule
from flywheel.monitoring.services import RuleFields, monitor_check, rule_create, scores_compute
from flywheel.registry import selectors as registry_selectors

from .conftest import SAFE_CALL, UNSAFE_CALL, shop

pytestmark = pytest.mark.django_db


def page(client, user, name, **kwargs):
    client.force_login(user)
    response = client.get(reverse(name, kwargs=kwargs))
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def alert(versions, store, rule, settings) -> Alert:
    settings.MONITOR_MIN_SAMPLES = 5
    v1, v2 = versions
    stored = store(*(shop(f"a{n}", [SAFE_CALL], version=v1.tag, outcome="success", duration_ms=100 * n)
                     for n in range(1, 7)),
                   *(shop(f"b{n}", [UNSAFE_CALL], version=v2.tag, outcome="success") for n in range(6)))  # fmt: skip
    Feedback.objects.create(trajectory=stored["b0"], thumb=Feedback.Thumb.DOWN)
    scores_compute(trajectory_ids=[row.pk for row in stored.values()])
    return monitor_check(agent=v2.agent)[0]


def test_the_monitor_shows_each_versions_rates_with_intervals_and_the_alert(client, make_user, alert):
    html = page(client, make_user(Role.VIEWER), "monitoring:agent_monitor", agent_name="shop")
    assert "100% [61–100%] · 6/6" in html  # v2's unsafe rate, with its Wilson interval and counts
    assert "0% [0–39%] · 0/6" in html  # v1's
    assert "100% [21–100%] · 1/1" in html  # v2's thumbs-down share
    assert "350 / 575 ms" in html  # v1's latency p50 / p95 over 100..600 ms
    assert f'data-alert="{alert.pk}"' in html and "Roll back to" not in html  # a viewer sees no rollback
    assert html.count('class="card chart"') == 7


def test_the_home_page_gives_approvers_the_alert_with_a_one_click_rollback(client, make_user, alert):
    html = page(client, make_user(Role.APPROVER), "dashboards:home")
    assert reverse("monitoring:alert_rollback", args=[alert.pk]) in html
    assert "Roll back to shop:v1" in html and 'name="reason"' in html
    viewer_html = page(client, make_user(Role.VIEWER), "dashboards:home")
    assert f'data-alert="{alert.pk}"' in viewer_html and "Roll back to" not in viewer_html


def test_the_rollback_form_needs_a_reason_then_rolls_back_and_resolves(client, make_user, alert):
    client.force_login(make_user(Role.APPROVER))
    url = reverse("monitoring:alert_rollback", args=[alert.pk])
    refused = client.post(url, {"reason": ""}, follow=True)
    assert "A rollback needs a written reason." in refused.content.decode()
    assert Alert.objects.get(pk=alert.pk).is_open
    done = client.post(url, {"reason": "deletes accounts"}, follow=True)
    assert "Rolled back shop to shop:v1; the alert is resolved." in done.content.decode()
    assert registry_selectors.live_version(agent=alert.agent) == alert.predecessor
    assert not Alert.objects.get(pk=alert.pk).is_open
    assert f'data-alert="{alert.pk}"' not in client.get(reverse("dashboards:home")).content.decode()


def test_a_trainer_cannot_roll_back_from_an_alert(client, make_user, alert):
    client.force_login(make_user(Role.TRAINER))
    assert client.post(reverse("monitoring:alert_rollback", args=[alert.pk]), {"reason": "x"}).status_code == 403
    assert Alert.objects.get(pk=alert.pk).is_open


def test_the_trace_viewer_lists_a_trajectorys_online_scores(client, make_user, store, rule):
    stored = store(shop("bad", [UNSAFE_CALL]))
    scores_compute(trajectory_ids=[stored["bad"].pk])
    html = page(client, make_user(Role.VIEWER), "ingest:trajectory_detail", trajectory_id=stored["bad"].pk)
    assert "safety failed" in html and "denied-tool (delete_account, step #1)" in html
    assert "schema passed" in html and "catalogue passed" in html


def test_the_index_lists_agents_with_their_rules_and_open_alerts(client, make_user, alert):
    html = page(client, make_user(Role.VIEWER), "monitoring:index")
    assert 'data-open-alerts="shop">1 regressed' in html


# --- rules ------------------------------------------------------------------------------------

RULE_POST = {"name": "deletes", "model_version": "", "outcome": "", "tool": "delete_account", "bucket": "",
             "sample_rate": "0.5", "scorers": ["safety", "catalogue"], "enabled": "on"}  # fmt: skip


def test_a_trainer_creates_edits_and_deletes_a_rule(client, make_user, agent):
    client.force_login(make_user(Role.TRAINER))
    created = client.post(reverse("monitoring:rule_new", args=["shop"]), RULE_POST)
    assert created.status_code == 302
    rule = ScoringRule.objects.get(name="deletes")
    assert (rule.tool, rule.sample_rate, rule.scorers, rule.enabled) == ("delete_account", 0.5,
                                                                         ["safety", "catalogue"], True)  # fmt: skip
    edit = reverse("monitoring:rule_edit", args=["shop", rule.pk])
    assert 'value="deletes"' in client.get(edit).content.decode()
    client.post(edit, {**RULE_POST, "sample_rate": "0.25", "enabled": ""})
    rule.refresh_from_db()
    assert (rule.sample_rate, rule.enabled) == (0.25, False)
    client.post(reverse("monitoring:rule_delete", args=["shop", rule.pk]))
    assert not ScoringRule.objects.exists()


def test_a_bad_rule_is_shown_back_with_its_errors(client, make_user, agent):
    rule_create(actor=None, agent=agent, fields=RuleFields(name="deletes"))
    client.force_login(make_user(Role.TRAINER))
    response = client.post(reverse("monitoring:rule_new", args=["shop"]), {**RULE_POST, "sample_rate": "2"})
    assert response.status_code == 400 and ScoringRule.objects.count() == 1
    response = client.post(reverse("monitoring:rule_new", args=["shop"]), RULE_POST)  # the name is taken
    assert response.status_code == 400 and "already exists" in response.content.decode()


@pytest.mark.parametrize("role", [Role.VIEWER, Role.REVIEWER, Role.APPROVER])
def test_only_trainers_and_admins_change_rules(client, make_user, rule, role):
    client.force_login(make_user(role))
    assert client.post(reverse("monitoring:rule_new", args=["shop"]), RULE_POST).status_code == 403
    assert client.post(reverse("monitoring:rule_edit", args=["shop", rule.pk]), RULE_POST).status_code == 403
    assert client.post(reverse("monitoring:rule_delete", args=["shop", rule.pk])).status_code == 403
    assert list(ScoringRule.objects.values_list("name", flat=True)) == ["everything"]
    html = page(client, make_user(role), "monitoring:rule_list", agent_name="shop")
    assert "everything" in html and "New rule" not in html
