"""`atomic_reconnecting`: a unit of work whose connection is lost runs again on a new one; other errors do not."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, transaction

from flywheel.core import db
from flywheel.core.db import atomic_reconnecting, connection_lost


def lost() -> OperationalError:
    error = OperationalError("server closed the connection unexpectedly")
    error.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
    return error


def deadlock() -> OperationalError:
    error = OperationalError("deadlock detected")
    error.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    return error


def failing_first(error: OperationalError, calls: list[int]):
    def work() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return "done"

    return work


@pytest.fixture
def no_waiting(monkeypatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(db.time, "sleep", waits.append)
    return waits


def test_it_tells_a_lost_connection_from_an_error_of_the_work():
    assert connection_lost(lost())
    assert not connection_lost(deadlock())
    assert not connection_lost(ValueError("x"))


@pytest.mark.django_db(transaction=True)
def test_work_whose_connection_was_lost_runs_again_after_a_wait(no_waiting):
    calls: list[int] = []
    assert atomic_reconnecting(failing_first(lost(), calls), what="test") == "done"
    assert len(calls) == 2 and no_waiting == [db.RECONNECT_FIRST_WAIT_SECONDS]


@pytest.mark.django_db(transaction=True)
def test_a_deadlock_is_raised_at_once_not_retried(no_waiting):
    calls: list[int] = []
    with pytest.raises(OperationalError, match="deadlock"):
        atomic_reconnecting(failing_first(deadlock(), calls), what="test")
    assert len(calls) == 1 and no_waiting == []


@pytest.mark.django_db(transaction=True)
def test_it_gives_up_once_the_reconnect_time_is_spent(no_waiting, settings):
    settings.DATABASE_RECONNECT_SECONDS = 0
    calls: list[int] = []
    with pytest.raises(OperationalError, match="closed the connection"):
        atomic_reconnecting(failing_first(lost(), calls), what="test")
    assert len(calls) == 1


@pytest.mark.django_db(transaction=True)
def test_inside_an_outer_transaction_nothing_is_retried(no_waiting):
    calls: list[int] = []
    with pytest.raises(OperationalError), transaction.atomic():
        atomic_reconnecting(failing_first(lost(), calls), what="test")
    assert len(calls) == 1
