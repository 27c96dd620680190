"""On PostgreSQL, the copy of a trajectory's `ingested_at` beside the rows that point to it, so that a
filter on them can lead the lists (`flywheel.ingest.selectors.Lead`); here: feedback.

The lists are newest first. A filter on another table (feedback here; buckets, suggestions and
review states in triage 0008) walked the newest trajectories testing each one, and such filters
match few of the newest rows: tens of thousands read for one page at 1,000,000 trajectories. With
the trajectory's place in the list beside each row, indexed in list order, the filter's own rows
name the candidates.

The function `trajectory_ingested_at_copy()` fills the column in a trigger on every INSERT (the
app's writes, bulk inserts and the load generator's COPY alike), so no write path can forget it; a
trajectory's `ingested_at` never changes once stored. Not a model field: SQLite, the embedded
default, walks the lists as before.
"""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION trajectory_ingested_at_copy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.trajectory_ingested_at := (SELECT ingested_at FROM ingest_trajectory WHERE id = NEW.trajectory_id);
    RETURN NEW;
END
$$
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION)
    schema_editor.execute("ALTER TABLE ingest_feedback ADD COLUMN IF NOT EXISTS trajectory_ingested_at timestamptz")
    schema_editor.execute(
        "UPDATE ingest_feedback AS row SET trajectory_ingested_at = trajectory.ingested_at "
        "FROM ingest_trajectory AS trajectory WHERE trajectory.id = row.trajectory_id"
    )
    # Every row has a trajectory (a foreign key): a NULL here would hide the row from a filtered list.
    schema_editor.execute("ALTER TABLE ingest_feedback ALTER COLUMN trajectory_ingested_at SET NOT NULL")
    schema_editor.execute(
        "CREATE TRIGGER ingest_feedback_ingested_at BEFORE INSERT OR UPDATE OF trajectory_id ON ingest_feedback "
        "FOR EACH ROW EXECUTE FUNCTION trajectory_ingested_at_copy()"
    )
    # Fired under session_replication_role = replica too (the load generator's COPY sets it, to skip
    # the foreign keys' triggers); a logical replica recomputes the same value.
    schema_editor.execute("ALTER TABLE ingest_feedback ENABLE ALWAYS TRIGGER ingest_feedback_ingested_at")
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS feedback_recent ON ingest_feedback "
        "(trajectory_ingested_at DESC, trajectory_id DESC)"
    )
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS feedback_thumb_recent ON ingest_feedback "
        "(thumb, trajectory_ingested_at DESC, trajectory_id DESC)"
    )
    schema_editor.execute("ANALYZE ingest_feedback")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP INDEX IF EXISTS feedback_thumb_recent")
    schema_editor.execute("DROP INDEX IF EXISTS feedback_recent")
    schema_editor.execute("DROP TRIGGER IF EXISTS ingest_feedback_ingested_at ON ingest_feedback")
    schema_editor.execute("ALTER TABLE ingest_feedback DROP COLUMN IF EXISTS trajectory_ingested_at")
    schema_editor.execute("DROP FUNCTION IF EXISTS trajectory_ingested_at_copy()")


class Migration(migrations.Migration):
    dependencies = [("ingest", "0009_search_vector")]
    operations = [migrations.RunPython(create, drop)]
