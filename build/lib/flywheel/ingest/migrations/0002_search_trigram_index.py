"""On PostgreSQL, index trajectory search text with pg_trgm so `icontains` search stays fast at scale."""

from django.db import migrations


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS trajectory_search_trgm ON ingest_trajectory USING gin (search_text gin_trgm_ops)"
    )


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS trajectory_search_trgm")


class Migration(migrations.Migration):
    dependencies = [("ingest", "0001_initial")]
    operations = [migrations.RunPython(create_index, drop_index)]
