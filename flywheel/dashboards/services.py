"""Writes of the dashboards app: the recounts behind the pages' counts (`CountSummary`), which beat runs."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from flywheel.core.services import recount_once, summaries_store
from flywheel.dashboards.selectors import DASHBOARD_KIND, dashboard_counts_by_agent
from flywheel.monitoring.services import monitor_summaries_recount
from flywheel.triage.services import queue_summaries_recount


def dashboard_summaries_recount() -> None:
    """Recount the home page's and dashboards' counts of every agent, in one transaction; once at a time
    (`recount_once`: a recount already running is waited for)."""

    def recount() -> None:
        with transaction.atomic():
            counted_at = timezone.now()
            summaries_store(kind=DASHBOARD_KIND, counts=dashboard_counts_by_agent(), counted_at=counted_at)

    recount_once(DASHBOARD_KIND, recount)


def summaries_recount() -> int:
    """Every summary: the dashboards', each queue's and each agent's monitor. Returns how many were recounted."""
    dashboard_summaries_recount()
    return 1 + queue_summaries_recount() + monitor_summaries_recount()


# When beat's next recount may start (a UNIX time), shared by every worker through the cache.
_PACED_KEY = "summaries-recount:not-before"


def summaries_recount_paced(*, clock: Callable[[], float] = time.time) -> int:
    """Beat's recount, paced so that it takes at most SUMMARY_RECOUNT_SHARE of the time: after a recount
    of T seconds, beat's ticks are skipped for T × (1 / share − 1) seconds, but never past half of
    SUMMARY_STALE_SECONDS (later than that, pages would start recounting for themselves). At a million
    trajectories one recount reads every row for about 16 s: each minute, as beat ticks, would give a
    quarter of a core to it. Returns how many summaries were recounted; 0 when the tick was skipped."""
    not_before = cache.get(_PACED_KEY)
    if not_before is not None and clock() < not_before:
        return 0
    started = clock()
    recounted = summaries_recount()
    took = clock() - started
    rest = min(took * (1 / settings.SUMMARY_RECOUNT_SHARE - 1), settings.SUMMARY_STALE_SECONDS / 2)
    cache.set(_PACED_KEY, clock() + rest, timeout=int(rest) + 1)
    return recounted
