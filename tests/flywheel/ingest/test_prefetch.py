import threading
import time

import pytest

from flywheel.ingest.prefetch import ahead


def test_it_yields_every_item_in_order_across_chunks():
    assert list(ahead(range(1234), chunk=50, depth=2)) == list(range(1234))


def test_it_yields_nothing_for_an_empty_iterator():
    assert list(ahead([])) == []


def test_an_error_reaches_the_consumer_after_every_item_before_it():
    def items():
        yield from range(7)
        raise ValueError("line 8: broken")

    seen = []
    with pytest.raises(ValueError, match="line 8: broken"):
        for item in ahead(items(), chunk=3):
            seen.append(item)
    assert seen == list(range(7))


def test_closing_the_consumer_stops_the_reader_thread_and_closes_its_iterator():
    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    consumer = ahead(endless(), chunk=10, depth=2)
    assert next(consumer) == 0
    consumer.close()
    assert closed.is_set()
    assert not any(thread.name == "ingest-ahead" for thread in threading.enumerate())


def test_the_read_ahead_stops_at_its_byte_budget():
    produced: list[int] = []

    def items():
        for n in range(1000):
            produced.append(n)
            yield n

    consumer = ahead(items(), chunk=50, depth=4, size=lambda item: 1000, max_bytes=5000)
    assert next(consumer) == 0
    time.sleep(0.3)  # the thread has had all the time it needs to run ahead
    # A chunk closes at the budget (5 items); one is handed over, one waits in the thread's hand.
    assert len(produced) <= 16, len(produced)
    consumer.close()


def test_one_item_larger_than_the_budget_still_moves_alone():
    assert list(ahead(iter([1, 2, 3]), size=lambda item: 10_000, max_bytes=100)) == [1, 2, 3]
