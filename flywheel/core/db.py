"""Database helpers shared by the apps: bulk inserts that use COPY on PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from django.db import connections, models, router


def bulk_insert(model: type[models.Model], objects: Sequence[models.Model]) -> None:
    """Insert rows fast: COPY on PostgreSQL, batched INSERTs elsewhere. No signals, no returned ids.

    Primary keys must be set by the caller unless the key is an auto field.
    """
    if not objects:
        return
    connection = connections[router.db_for_write(model)]
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(objects, batch_size=500)
        return
    fields = [field for field in model._meta.concrete_fields if not isinstance(field, models.AutoField)]
    columns = ", ".join(connection.ops.quote_name(cast(str, field.column)) for field in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    # The raw psycopg cursor gives COPY; the wrapper turns its errors into Django's (IntegrityError...).
    sql = f"COPY {table} ({columns}) FROM STDIN"
    with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(sql) as copy:
        for obj in objects:
            copy.write_row([field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields])
