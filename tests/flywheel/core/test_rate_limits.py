"""Per-token rate limits on the ingest API, the OTLP receiver and chat completions: 429 with Retry-After."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from tests.flywheel.test_settings import PRODUCTION_ENV, run_django

pytestmark = pytest.mark.django_db
INGEST_URL = reverse("ingest:api_trajectories") + "?agent=support-bot"


@pytest.fixture(autouse=True)
def small_budgets(settings):
    settings.API_RATE_LIMITS = {"ingest": 3, "chat": 2}
    settings.API_RATE_WINDOW_SECONDS = 60


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def ingest(client, secret: str):
    return client.post(INGEST_URL, "[]", content_type="application/json", **bearer(secret))


def chat(client, secret: str):
    body = '{"model": "support-bot", "messages": [{"role": "user", "content": "hi"}]}'
    return client.post(reverse("registry:chat_completions"), body, content_type="application/json", **bearer(secret))


def test_the_call_past_the_ingest_budget_gets_429_with_retry_after(client, make_user):
    _, secret = api_token_create(user=make_user(Role.REVIEWER), name="agent")
    assert [ingest(client, secret).status_code == 429 for _ in range(3)] == [False] * 3
    refused = ingest(client, secret)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "3 requests per 60 s" in refused.json()["error"]


def test_another_token_keeps_its_own_budget(client, make_user):
    reviewer = make_user(Role.REVIEWER)
    _, busy = api_token_create(user=reviewer, name="busy")
    _, quiet = api_token_create(user=reviewer, name="quiet")
    for _ in range(4):
        ingest(client, busy)
    assert ingest(client, busy).status_code == 429
    assert ingest(client, quiet).status_code != 429


def test_otlp_and_the_trajectory_api_share_one_ingest_budget(client, make_user):
    _, secret = api_token_create(user=make_user(Role.REVIEWER), name="otel")
    for _ in range(3):
        ingest(client, secret)
    refused = client.post(reverse("otlp_traces"), b"{}", content_type="application/json", **bearer(secret))
    assert refused.status_code == 429
    assert refused["Retry-After"]


def test_the_call_past_the_chat_budget_gets_429_in_openais_error_form(client, make_user):
    _, secret = api_token_create(user=make_user(Role.VIEWER), name="agent")
    assert [chat(client, secret).status_code for _ in range(2)] == [404, 404]  # no live version, but counted
    refused = chat(client, secret)
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_exceeded"
    _, other = api_token_create(user=make_user(Role.VIEWER), name="other")
    assert chat(client, other).status_code == 404


def test_a_browser_session_is_limited_per_user(client, make_user):
    client.force_login(make_user(Role.REVIEWER))
    for _ in range(3):
        client.post(INGEST_URL, "[]", content_type="application/json")
    assert client.post(INGEST_URL, "[]", content_type="application/json").status_code == 429


def test_the_budget_comes_back_after_the_window(client, make_user, settings):
    settings.API_RATE_WINDOW_SECONDS = 2
    _, secret = api_token_create(user=make_user(Role.REVIEWER), name="agent")
    for _ in range(3):
        ingest(client, secret)
    refused = ingest(client, secret)
    assert refused.status_code == 429
    time.sleep(int(refused["Retry-After"]) + 0.1)
    assert ingest(client, secret).status_code != 429


def test_a_cache_outage_lets_calls_through(client, make_user, settings):
    # Nothing listens on port 9: the limit cannot be counted, and ingestion must not stop for that.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:9/0"}}  # fmt: skip
    _, secret = api_token_create(user=make_user(Role.REVIEWER), name="agent")
    assert [ingest(client, secret).status_code == 429 for _ in range(5)] == [False] * 5


SHOW_CACHE = (
    "from django.conf import settings as s; print(s.CACHES['default']['BACKEND'], s.CACHES['default']['LOCATION'])"
)


def test_production_counts_in_the_brokers_redis_so_every_web_process_shares_the_limit():
    result = run_django(PRODUCTION_ENV, "shell", "-c", SHOW_CACHE)
    assert result.returncode == 0, result.stderr
    assert "django.core.cache.backends.redis.RedisCache redis://redis.internal:6379/0" in result.stdout


def test_production_with_another_broker_asks_for_a_cache_url():
    result = run_django({**PRODUCTION_ENV, "CELERY_BROKER_URL": "amqp://rabbit.internal//"}, "check")
    assert result.returncode != 0
    assert "CACHE_URL" in result.stderr
    with_cache = {
        **PRODUCTION_ENV,
        "CELERY_BROKER_URL": "amqp://rabbit.internal//",
        "CACHE_URL": "redis://cache:6379/1",
    }
    assert "redis://cache:6379/1" in run_django(with_cache, "shell", "-c", SHOW_CACHE).stdout


def test_the_embedded_demo_counts_in_process_memory(tmp_path):
    env = {"DATABASE_URL": None, "CELERY_BROKER_URL": None, "CACHE_URL": None, "FLYWHEEL_VAR_DIR": str(tmp_path)}
    result = run_django(env, "shell", "-c", SHOW_CACHE)
    assert result.returncode == 0, result.stderr
    assert "django.core.cache.backends.locmem.LocMemCache" in result.stdout
