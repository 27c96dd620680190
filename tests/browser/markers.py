"""The marker lists browser test modules take as their `pytestmark`, one per kind of browser test.

- `PAGE`: pages in a real Chromium over the live server, no Celery worker.
- `PAGE_WITH_WORKER`: the same, with a real Celery worker doing the work the page waits on.
- `JOURNEY`: a long journey across the app with a worker (and often a tiny model): slow, 900 s each.

A module that needs more (a fixture for every test) adds it: `[*PAGE, pytest.mark.usefixtures(...)]`.
Not covered: the markers themselves, which pyproject.toml declares (`--strict-markers`).
"""

from __future__ import annotations

import pytest

_TRANSACTIONAL_DB = pytest.mark.django_db(transaction=True)

PAGE = [pytest.mark.browser, _TRANSACTIONAL_DB]
PAGE_WITH_WORKER = [pytest.mark.browser, pytest.mark.worker, _TRANSACTIONAL_DB]
JOURNEY = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow, pytest.mark.timeout(900), _TRANSACTIONAL_DB]
