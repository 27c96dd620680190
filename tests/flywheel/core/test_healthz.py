from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse


@pytest.mark.django_db
def test_it_answers_200_when_the_database_and_broker_answer(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "broker": "ok"}


@pytest.mark.django_db
@override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0", CELERY_BROKER_TRANSPORT_OPTIONS={})
def test_it_answers_503_naming_the_broker_when_the_broker_port_is_closed(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["broker"]
    assert body["checks"] == {"database": "ok", "broker": "unavailable"}


@pytest.mark.django_db
def test_it_answers_503_naming_the_database_when_queries_fail(client, monkeypatch):
    from django.db.backends.utils import CursorWrapper

    def refuse(self, sql, params=None):
        raise RuntimeError("database is down")

    monkeypatch.setattr(CursorWrapper, "execute", refuse)
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    assert response.json()["failing"] == ["database"]


@pytest.mark.django_db
def test_it_never_shows_the_exception_text_and_logs_it_instead(client, monkeypatch, caplog):
    from django.db.backends.utils import CursorWrapper

    secret = 'connection to server at "db.internal" (10.0.0.7), port 5432 failed: password for user "flywheel"'

    def refuse(self, sql, params=None):
        raise RuntimeError(secret)

    monkeypatch.setattr(CursorWrapper, "execute", refuse)
    response = client.get(reverse("healthz"))
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unavailable"
    assert "db.internal" not in response.content.decode() and "RuntimeError" not in response.content.decode()
    assert any(secret in (record.exc_text or "") or (record.exc_info and secret in str(record.exc_info[1]))
               for record in caplog.records)  # fmt: skip
