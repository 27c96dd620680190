import threading

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
