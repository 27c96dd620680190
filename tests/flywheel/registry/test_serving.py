"""The app's own model server is bounded: one child per web process, and at most one start per interval."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.registry import selectors, serving

TARGET = serving.Target(tag="support-bot:v1", base_model="tiny", adapter="/nonexistent", sha256="a" * 64,
                        config_sha256="b" * 64, lora_module="support-bot-v1")  # fmt: skip


@pytest.fixture
def failing_server(settings, tmp_path, monkeypatch) -> Path:
    """A serve command that records each start in a file and exits without listening."""
    starts = tmp_path / "starts"
    script = f"open({str(starts)!r}, 'a').write('start\\n')"
    settings.SERVE_COMMAND = [sys.executable, "-c", script]
    settings.SERVE_STARTUP_SECONDS = 10
    settings.SERVE_RESTART_MIN_SECONDS = 60
    settings.VAR_DIR = str(tmp_path)
    monkeypatch.setattr(serving.Target, "verified_adapter", lambda target: str(tmp_path))
    return starts


def test_a_failed_start_is_not_retried_by_every_request(failing_server):
    server = serving.ManagedServer()
    with pytest.raises(serving.ServingUnavailable, match="did not start"):
        server.ensure(TARGET)
    for _ in range(5):
        with pytest.raises(serving.ServingUnavailable, match="retry in") as refused:
            server.ensure(TARGET)
        assert 1 <= refused.value.retry_after <= 60
    assert failing_server.read_text().count("start") == 1


def test_a_start_is_tried_again_once_the_interval_has_passed(failing_server, settings):
    settings.SERVE_RESTART_MIN_SECONDS = 0
    server = serving.ManagedServer()
    for _ in range(2):
        with pytest.raises(serving.ServingUnavailable, match="did not start"):
            server.ensure(TARGET)
    assert failing_server.read_text().count("start") == 2


def test_stopping_the_server_clears_the_interval(failing_server):
    server = serving.ManagedServer()
    with pytest.raises(serving.ServingUnavailable, match="did not start"):
        server.ensure(TARGET)
    server.stop()
    with pytest.raises(serving.ServingUnavailable, match="did not start"):
        server.ensure(TARGET)
    assert failing_server.read_text().count("start") == 2


@pytest.mark.django_db
def test_the_chat_endpoint_tells_the_caller_when_to_retry(client, make_user, monkeypatch):
    live = SimpleNamespace(version=SimpleNamespace(tag="support-bot:v1"))
    monkeypatch.setattr(selectors, "live_pointer_for", lambda **kwargs: live)

    def not_yet(**kwargs):
        raise serving.ServingUnavailable("started a moment ago", retry_after=7)

    monkeypatch.setattr(serving, "chat_forward", not_yet)
    _, secret = api_token_create(user=make_user(Role.VIEWER), name="agent")
    body = json.dumps({"model": "support-bot", "messages": [{"role": "user", "content": "hi"}]})
    response = client.post(
        reverse("registry:chat_completions"),
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert response.status_code == 503
    assert response["Retry-After"] == "7"
    assert response.json()["error"]["type"] == "serving_unavailable"
