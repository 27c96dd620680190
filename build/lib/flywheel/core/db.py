"""Database helpers shared by the apps: bulk inserts that use COPY on PostgreSQL, and transactions
that ride out a lost connection.

Only inserts: no upserts, no returned ids, no signals. The SQLite path builds model instances
and calls `bulk_create`, so both databases store the same values.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from operator import itemgetter
from typing import Any, TypeVar, cast

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections, models, router, transaction

logger = logging.getLogger(__name__)
_T = TypeVar("_T")
# SQLSTATEs of a server going away or not back yet: class 08 (connection exception), and
# admin_shutdown, crash_shutdown, cannot_connect_now (a fast restart, a crash, "starting up").
_SERVER_GONE_STATES = ("57P01", "57P02", "57P03")
RECONNECT_FIRST_WAIT_SECONDS = 0.5
RECONNECT_LONGEST_WAIT_SECONDS = 5.0

COPY_CHUNK_ROWS = 1000

Encoder = Callable[[Any], str]
NULL = "\\N"
# One encoder object, built once: json.dumps with keyword arguments builds a new one per call.
_json_dumps = json.JSONEncoder(ensure_ascii=False).encode


def _text(value: Any) -> str:
    """COPY's text escapes: backslash, newline, carriage return and tab; most values have none."""
    if value is None:
        return NULL
    if "\\" in value or "\n" in value or "\r" in value or "\t" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return cast(str, value)


def _json(value: Any) -> str:
    if value is None:
        return NULL
    if not value and type(value) is dict:
        return "{}"
    # Compact JSON holds no raw newline, carriage return or tab (they are escaped inside strings),
    # so only its backslashes need doubling.
    encoded = _json_dumps(value)
    return encoded.replace("\\", "\\\\") if "\\" in encoded else encoded


def _boolean(value: Any) -> str:
    return NULL if value is None else ("t" if value else "f")


def _timestamp(value: Any) -> str:
    return NULL if value is None else value.isoformat()


def _plain(value: Any) -> str:
    return NULL if value is None else str(value)  # numbers and UUIDs print as PostgreSQL reads them


def _field_encoder(field: models.Field) -> Encoder:
    """How one column's values are written in COPY's text format, chosen once per field."""
    if isinstance(field, models.JSONField):
        return _json
    if isinstance(field, models.BooleanField):
        return _boolean
    if isinstance(field, models.DateTimeField):
        return _timestamp
    if isinstance(field, models.CharField | models.TextField):
        return _text
    return _plain


@dataclass(frozen=True)
class _CopyPlan:
    sql: str
    values: Callable[[dict[str, Any]], tuple[Any, ...]]  # a row's values in column order
    encoders: tuple[Encoder, ...]


@cache
def _copy_plan(model: type[models.Model]) -> _CopyPlan:
    """How COPY fills the model's table: every column but an auto key."""
    connection = connections[router.db_for_write(model)]
    fields = [field for field in model._meta.concrete_fields if not isinstance(field, models.AutoField)]
    names = ", ".join(connection.ops.quote_name(cast(str, field.column)) for field in fields)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({names}) FROM STDIN"
    # itemgetter of two or more names gives a tuple (one name would give the bare value).
    values = (
        itemgetter(*[field.attname for field in fields]) if len(fields) > 1 else lambda row: (row[fields[0].attname],)
    )
    return _CopyPlan(sql, values, tuple(_field_encoder(field) for field in fields))


def copy_text(model: type[models.Model], rows: Sequence[dict[str, Any]]) -> str:
    """The rows in COPY's text format, one line each, columns in the order `bulk_insert` copies them."""
    plan = _copy_plan(model)
    encoders, values = plan.encoders, plan.values
    return "".join(
        ["\t".join([encode(value) for encode, value in zip(encoders, values(row), strict=True)]) + "\n" for row in rows]
    )


def bulk_insert(model: type[models.Model], rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows given as {attribute name: value}: COPY on PostgreSQL, batched INSERTs elsewhere.

    No model instances are built on PostgreSQL (that is most of the cost at ingest rates), so
    every column must be given except an auto primary key; no signals run, no ids come back.
    """
    if not rows:
        return
    connection = connections[router.db_for_write(model)]
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create([model(**row) for row in rows], batch_size=500)
        return
    sql = _copy_plan(model).sql
    # The raw psycopg cursor gives COPY; the wrapper turns its errors into Django's (IntegrityError...).
    # Sent in chunks, so the server digests one while the next is encoded.
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(sql) as copy:
        for start in range(0, len(rows), COPY_CHUNK_ROWS):
            copy.write(copy_text(model, rows[start : start + COPY_CHUNK_ROWS]))


def connection_lost(error: BaseException) -> bool:
    """Whether `error` says the database server went away (restart, crash, network), not that the work was wrong.

    A deadlock or a lock timeout is an OperationalError too, but the connection is fine: those are not it.
    """
    if not isinstance(error, OperationalError | InterfaceError):
        return False
    state = getattr(error.__cause__, "sqlstate", None)
    return state is None or state.startswith("08") or state in _SERVER_GONE_STATES


def atomic_reconnecting(work: Callable[[], _T], *, what: str) -> _T:
    """`work()` in a transaction of its own; when the connection is lost, run it again on a new one.

    A lost connection takes the whole transaction with it (the server rolls it back), so running
    `work` again from the start is safe, as long as it changes nothing outside the database or
    undoes that itself. Waits double from half a second up to five, for DATABASE_RECONNECT_SECONDS
    in all, then the error is raised. Inside an outer transaction nothing is retried: the outer
    work was lost with the connection, and only its owner can redo it.
    """
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        with transaction.atomic():
            return work()
    deadline = time.monotonic() + settings.DATABASE_RECONNECT_SECONDS
    wait = RECONNECT_FIRST_WAIT_SECONDS
    while True:
        try:
            with transaction.atomic():
                return work()
        except (OperationalError, InterfaceError) as error:
            if not connection_lost(error) or time.monotonic() + wait > deadline:
                raise
            logger.warning("%s: the database connection was lost (%s); retrying in %.1f s", what,
                           str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__,
                           wait)  # fmt: skip
            connection.close()  # a fresh connection for the next try; closing a dead one raises nothing
            time.sleep(wait)
            wait = min(wait * 2, RECONNECT_LONGEST_WAIT_SECONDS)
