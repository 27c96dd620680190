"""Database helpers shared by the apps: bulk inserts that use COPY on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, cast

from django.db import connections, models, router

COPY_CHUNK_ROWS = 1000

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
Encoder = Callable[[Any], str]


NULL = "\\N"


def _text(value: Any) -> str:
    return NULL if value is None else value.translate(_COPY_ESCAPES)


def _json(value: Any) -> str:
    if value is None:
        return NULL
    return "{}" if value == {} else json.dumps(value, ensure_ascii=False).translate(_COPY_ESCAPES)


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


@cache
def _copy_columns(model: type[models.Model]) -> tuple[tuple[str, str, Encoder], ...]:
    """(attribute name, quoted column, encoder) for every column COPY fills: all but an auto key."""
    connection = connections[router.db_for_write(model)]
    return tuple(
        (field.attname, connection.ops.quote_name(cast(str, field.column)), _field_encoder(field))
        for field in model._meta.concrete_fields
        if not isinstance(field, models.AutoField)
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
    columns = _copy_columns(model)
    names = ", ".join(column for _, column, _ in columns)
    sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({names}) FROM STDIN"
    # The raw psycopg cursor gives COPY; the wrapper turns its errors into Django's (IntegrityError...).
    # Sent in chunks, so the server digests one while the next is encoded.
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(sql) as copy:
        for start in range(0, len(rows), COPY_CHUNK_ROWS):
            chunk = rows[start : start + COPY_CHUNK_ROWS]
            copy.write("".join(["\t".join([encode(row[name]) for name, _, encode in columns]) + "\n" for row in chunk]))
