"""A Redis database of its own for each pytest-xdist worker, chosen before Django reads its settings.

Loaded as a plugin (`-p tests.xdist_broker` in pyproject's addopts): plugins are imported before
pytest-django sets Django up, conftest files after. The workers would otherwise share the broker's
queues (one worker's Celery subprocess running another's jobs, on a database it cannot see). Worker gwN
takes the database N below the one CELERY_BROKER_URL names; the test databases are suffixed by
pytest-django itself (test_flywheel_gw0, ...).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit


def worker_broker_url(url: str, worker: str) -> str:
    """`url` moved to the worker's own Redis database; other brokers as they are.

    >>> worker_broker_url("redis://127.0.0.1:6379/15", "gw1")
    'redis://127.0.0.1:6379/14'
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    base = int(parts.path.strip("/") or 0)
    number = base - int(worker.removeprefix("gw"))
    if number < 0:
        raise RuntimeError(f"{url}: too few Redis databases below it for xdist worker {worker}")
    return urlunsplit(parts._replace(path=f"/{number}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and "CELERY_BROKER_URL" in os.environ:
    os.environ["CELERY_BROKER_URL"] = worker_broker_url(os.environ["CELERY_BROKER_URL"], _worker)
