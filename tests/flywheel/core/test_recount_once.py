"""One recount of a summary at a time: requests that find it stale together wait for one recount."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.cache import cache
from django.db import connection

from flywheel.core.models import CountSummary
from flywheel.core.roles import Role
from flywheel.core.services import agent_create, recount_once
from flywheel.dashboards import selectors as dashboards
from flywheel.dashboards import services as dashboard_services
from flywheel.monitoring import selectors as monitoring
from flywheel.monitoring import services as monitoring_services


@pytest.fixture(autouse=True)
def _no_keys_left():
    cache.clear()
    yield
    cache.clear()


def test_a_recount_asked_for_while_another_runs_waits_for_it_and_never_runs_its_own():
    started, runs, waited = threading.Event(), [], []

    def slow() -> None:
        runs.append("first")
        started.set()
        time.sleep(0.5)
        runs.append("first done")

    first = threading.Thread(target=recount_once, args=("k", slow))
    first.start()
    started.wait(5)
    ran_here = recount_once("k", lambda: runs.append("second"))
    waited.append(list(runs))
    first.join()
    assert ran_here is False
    assert waited == [["first", "first done"]]  # it returned once the first had stored its counts
    assert recount_once("k", lambda: runs.append("third")) is True  # the key is free again
    assert runs == ["first", "first done", "third"]
    assert recount_once("other", lambda: None) is True


def test_a_key_released_before_the_waiter_first_reads_it_is_not_taken_for_a_dead_holder(monkeypatch):
    """The holder finished between the waiter's add (refused) and its first read: its counts are stored."""
    real_add, calls = cache.add, []

    def add(*args, **kwargs):
        calls.append(args)
        return False if len(calls) == 1 else real_add(*args, **kwargs)

    monkeypatch.setattr(cache, "add", add)
    runs = []
    assert recount_once("k", lambda: runs.append("here")) is False
    assert runs == []
    assert len(calls) == 1  # it did not try for the key again


def test_a_recount_that_raises_frees_its_key():
    with pytest.raises(RuntimeError):
        recount_once("k", lambda: (_ for _ in ()).throw(RuntimeError("database gone")))
    assert recount_once("k", lambda: None) is True


@pytest.mark.django_db(transaction=True)
def test_pages_that_find_the_dashboards_stale_together_start_one_recount(make_user, monkeypatch):
    agent_create(actor=None, name="airline")
    viewer = make_user(Role.VIEWER)
    counted = []
    count_by_agent = dashboard_services.dashboard_counts_by_agent

    def slow_count():
        counted.append(1)
        time.sleep(0.5)  # long enough for every page below to find the summary missing
        return count_by_agent()

    monkeypatch.setattr(dashboard_services, "dashboard_counts_by_agent", slow_count)
    results, errors = [], []

    def page() -> None:
        try:
            results.append(dashboards.dashboard_counts(viewer=viewer).rows)
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)
        finally:
            connection.close()

    pages = [threading.Thread(target=page) for _ in range(4)]
    for thread in pages:
        thread.start()
    for thread in pages:
        thread.join()
    assert errors == []
    assert len(counted) == 1
    assert [len(rows) for rows in results] == [1, 1, 1, 1]  # each page read the one recount's rows


@pytest.mark.django_db
def test_a_monitor_whose_recount_holder_died_is_counted_once_its_key_lapses():
    agent = agent_create(actor=None, name="airline")
    # A worker killed mid-recount: its key, holding when it lapses, stays until then.
    cache.add(f"recount-running:{monitoring.MONITOR_KIND}:{agent.pk}", time.time() + 1, timeout=1)
    started = time.monotonic()
    summary = monitoring._monitor_counted(agent)
    assert time.monotonic() - started >= 0.5  # it waited for the key to lapse
    assert summary == CountSummary.objects.get(agent=agent, kind=monitoring.MONITOR_KIND)
    assert monitoring_services.monitor_summaries_recount(agents=[agent]) == 1


def test_a_cache_outage_leaves_each_caller_recounting_for_itself(monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError("the cache is down")

    for method in ("add", "get", "delete"):
        monkeypatch.setattr(cache, method, unreachable)
    runs = []
    assert recount_once("k", lambda: runs.append(1)) is True
    assert recount_once("k", lambda: runs.append(2)) is True
    assert runs == [1, 2]


def test_a_cache_that_fails_while_held_neither_hangs_a_waiter_nor_fails_the_holder(monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError("the cache is down")

    cache.add("recount-running:k", time.time() + 30, timeout=30)  # another process holds the key
    monkeypatch.setattr(cache, "get", unreachable)
    started = time.monotonic()
    assert recount_once("k", lambda: pytest.fail("the holder's recount runs, not this one")) is False
    assert time.monotonic() - started < 5
    cache.delete("recount-running:k")
    monkeypatch.setattr(cache, "delete", unreachable)
    assert recount_once("other", lambda: None) is True  # counted; its key lapses by itself
