"""Run an iterator ahead of its consumer in a background thread, so parsing overlaps database waits.

`ahead(items)` yields what `items` yields, in order, while a thread computes the next ones into
a bounded buffer; the consumer's waits on the database release the GIL, and the thread fills
them. The buffer is bounded by chunks (`depth`) and, given `size`, by bytes too (`max_bytes`):
the thread waits while what it handed over and the consumer has not taken would pass the cap, so
a few huge items never pile up the way many small ones may. An exception raised by `items` is
raised to the consumer where it happened, after every item before it. Closing the consumer stops
the thread before `ahead` returns, so nothing reads the caller's stream afterwards. The iterator
must not touch the database (Django's connections belong to their thread) and must be safe to run
in another thread; it runs in a copy of the caller's context variables. This module knows nothing
of trajectories.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Generator, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")
CHUNK_ITEMS = 50  # handed over together: one queue operation per chunk, not per item
DEPTH_CHUNKS = 4  # chunks buffered ahead at most (200 records): bounds what the thread holds
_POLL_SECONDS = 0.1


class _End:
    """Marks the last chunk: the iterator is exhausted."""


# (items, end marker or exception, their size in bytes)
_Chunk = tuple[list[T], BaseException | type[_End] | None, int]


class _ByteBudget:
    """Bytes handed over and not yet taken; `take` waits while a new chunk would pass the cap.

    A chunk is always let through when nothing is outstanding, so one item larger than the cap
    still moves (alone).
    """

    def __init__(self, cap: int) -> None:
        self.cap, self._outstanding = cap, 0
        self._changed = threading.Condition()

    def take(self, amount: int, stop: threading.Event) -> bool:
        with self._changed:
            while self._outstanding and self._outstanding + amount > self.cap:
                if stop.is_set():
                    return False
                self._changed.wait(_POLL_SECONDS)
            self._outstanding += amount
            return True

    def give_back(self, amount: int) -> None:
        with self._changed:
            self._outstanding -= amount
            self._changed.notify_all()


def ahead(
    items: Iterable[T],
    *,
    chunk: int = CHUNK_ITEMS,
    depth: int = DEPTH_CHUNKS,
    size: Callable[[T], int] | None = None,
    max_bytes: int = 0,
) -> Generator[T, None, None]:
    """`items`, computed ahead; with `size` and `max_bytes`, at most about `max_bytes` of them waiting."""
    buffer: queue.Queue[_Chunk[T]] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    budget = _ByteBudget(max_bytes) if size is not None and max_bytes > 0 else None
    context = contextvars.copy_context()
    producer: _Producer[T] = _Producer(items, buffer, stop, chunk, size if budget else None, budget)
    thread = threading.Thread(target=context.run, args=(producer.run,), name="ingest-ahead", daemon=True)
    thread.start()
    try:
        while True:
            values, end, nbytes = buffer.get()
            if budget is not None:
                budget.give_back(nbytes)
            yield from values
            if end is _End:
                return
            if isinstance(end, BaseException):
                raise end
    finally:
        stop.set()
        thread.join()


class _Producer(Generic[T]):
    """The thread's side: fills chunks, closes one at `chunk` items or at the byte cap, hands it over."""

    def __init__(
        self,
        items: Iterable[T],
        buffer: queue.Queue[_Chunk[T]],
        stop: threading.Event,
        chunk: int,
        size: Callable[[T], int] | None,
        budget: _ByteBudget | None,
    ) -> None:
        self.items, self.buffer, self.stop, self.chunk = items, buffer, stop, chunk
        self.size, self.budget = size, budget

    def run(self) -> None:
        values: list[T] = []
        nbytes = 0
        iterator = iter(self.items)
        try:
            for value in iterator:
                values.append(value)
                nbytes += self.size(value) if self.size else 0
                if len(values) >= self.chunk or (self.budget is not None and nbytes >= self.budget.cap):
                    if not self._put((values, None, nbytes)):
                        return
                    values, nbytes = [], 0
            self._put((values, _End, nbytes))
        except BaseException as exc:  # handed to the consumer, which raises it in its own thread
            self._put((values, exc, nbytes))
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def _put(self, item: _Chunk[T]) -> bool:
        """Hand a chunk over; False once the consumer has stopped listening."""
        if self.budget is not None and not self.budget.take(item[2], self.stop):
            return False
        while not self.stop.is_set():
            try:
                self.buffer.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False
