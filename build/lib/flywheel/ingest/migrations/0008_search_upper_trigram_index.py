"""On PostgreSQL, index the trajectory search text as `icontains` reads it: upper(search_text) with pg_trgm.

Django writes `search_text__icontains` as `UPPER("search_text"::text) LIKE UPPER(%s)`, which the
0002 index on the bare column could never serve (measured: a sequential scan of every
trajectory, 2.9 s at 100,000 on a busy 2-core machine). This index serves it; the bare one
costs every ingest and goes.
"""

from django.db import migrations


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP INDEX IF EXISTS trajectory_search_trgm")
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS trajectory_search_upper_trgm ON ingest_trajectory "
        "USING gin ((upper(search_text)) gin_trgm_ops)"
    )


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP INDEX IF EXISTS trajectory_search_upper_trgm")
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS trajectory_search_trgm ON ingest_trajectory USING gin (search_text gin_trgm_ops)"
    )


class Migration(migrations.Migration):
    dependencies = [("ingest", "0007_otlp_span_response_id")]
    operations = [migrations.RunPython(create_index, drop_index)]
