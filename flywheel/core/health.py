"""Readiness probes for /healthz: the database and the Celery broker."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from kombu import Connection


def database_problem() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any failure means "not ready"; the reason is reported
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def broker_problem() -> str | None:
    timeout = settings.HEALTHZ_TIMEOUT_SECONDS
    broker = Connection(
        settings.CELERY_BROKER_URL,
        transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        connect_timeout=timeout,
    )
    try:
        broker.ensure_connection(max_retries=1, timeout=timeout)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    finally:
        broker.release()
    return None
