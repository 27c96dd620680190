"""Readiness probes for /healthz: the database and the Celery broker.

Each probe answers None when its component is ready, or a fixed word when it is not; the
exception itself goes to the log only, since /healthz is public and an error's text may name
hosts, users or paths.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection
from kombu import Connection

logger = logging.getLogger(__name__)
UNAVAILABLE = "unavailable"


def database_problem() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # any failure means "not ready"; the reason is logged
        logger.warning("healthz: the database did not answer", exc_info=True)
        return UNAVAILABLE
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
    except Exception:
        logger.warning("healthz: the broker did not answer", exc_info=True)
        return UNAVAILABLE
    finally:
        broker.release()
    return None
