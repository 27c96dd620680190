from __future__ import annotations

import pytest

from tests.xdist_broker import worker_broker_url


def test_each_xdist_worker_gets_its_own_redis_database_below_the_one_named():
    assert worker_broker_url("redis://127.0.0.1:6379/15", "gw0") == "redis://127.0.0.1:6379/15"
    assert worker_broker_url("rediss://:secret@cache:6380/15", "gw3") == "rediss://:secret@cache:6380/12"
    assert worker_broker_url("redis://127.0.0.1:6379", "gw0") == "redis://127.0.0.1:6379/0"


def test_a_broker_that_is_not_redis_is_left_alone_and_too_few_databases_is_an_error():
    assert worker_broker_url("filesystem://localhost/", "gw1") == "filesystem://localhost/"
    with pytest.raises(RuntimeError, match="too few Redis databases"):
        worker_broker_url("redis://127.0.0.1:6379/1", "gw2")
