"""Run an iterator ahead of its consumer in a background thread, so parsing overlaps database waits.

`ahead(items)` yields what `items` yields, in order, while a thread computes the next ones into
a bounded buffer; the consumer's waits on the database release the GIL, and the thread fills
them. An exception raised by `items` is raised to the consumer where it happened, after every
item before it. Closing the consumer stops the thread before `ahead` returns, so nothing reads
the caller's stream afterwards. The iterator must not touch the database (Django's connections
belong to their thread) and must be safe to run in another thread; it runs in a copy of the
caller's context variables. This module knows nothing of trajectories.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Generator, Iterable
from typing import TypeVar

T = TypeVar("T")
CHUNK_ITEMS = 50  # handed over together: one queue operation per chunk, not per item
DEPTH_CHUNKS = 4  # chunks buffered ahead at most (200 records): bounds what the thread holds
_POLL_SECONDS = 0.1


class _End:
    """Marks the last chunk: the iterator is exhausted."""


_Chunk = tuple[list[T], BaseException | type[_End] | None]


def ahead(items: Iterable[T], *, chunk: int = CHUNK_ITEMS, depth: int = DEPTH_CHUNKS) -> Generator[T, None, None]:
    buffer: queue.Queue[_Chunk[T]] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    context = contextvars.copy_context()
    thread = threading.Thread(
        target=context.run, args=(_produce, items, buffer, stop, chunk), name="ingest-ahead", daemon=True
    )
    thread.start()
    try:
        while True:
            values, end = buffer.get()
            yield from values
            if end is _End:
                return
            if isinstance(end, BaseException):
                raise end
    finally:
        stop.set()
        thread.join()


def _produce(items: Iterable[T], buffer: queue.Queue[_Chunk[T]], stop: threading.Event, chunk: int) -> None:
    values: list[T] = []
    iterator = iter(items)
    try:
        for value in iterator:
            values.append(value)
            if len(values) >= chunk:
                if not _put(buffer, (values, None), stop):
                    return
                values = []
        _put(buffer, (values, _End), stop)
    except BaseException as exc:  # handed to the consumer, which raises it in its own thread
        _put(buffer, (values, exc), stop)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def _put(buffer: queue.Queue[_Chunk[T]], item: _Chunk[T], stop: threading.Event) -> bool:
    """Hand a chunk over; False once the consumer has stopped listening."""
    while not stop.is_set():
        try:
            buffer.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False
