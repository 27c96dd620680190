"""On PostgreSQL, each bucket assignment, suggestion and review carries its trajectory's `ingested_at`,
indexed in the lists' order, so that a bucket, suggested-bucket or review-state filter can lead the
triage list (`flywheel.ingest.selectors.Lead`; the why and the trigger's function: ingest 0010).

These filters match few of the newest trajectories (reviews come days after ingestion): the triage
list walked about 40,000 of them for one page at 1,000,000 trajectories, 160 to 220 ms of SQL. The
backfill rewrites the three tables once (43 s at 1,000,000 trajectories on a 2-core machine).
"""

from django.db import migrations

TABLES = ("triage_bucketassignment", "triage_suggestion", "triage_review")
# (name, table, indexed columns, condition): each filter's rows in the list's order.
INDEXES = (
    ("assignment_bucket_recent", "triage_bucketassignment", "bucket_id", ""),
    ("suggestion_bucket_recent", "triage_suggestion", "bucket_id", "WHERE bucket_id IS NOT NULL"),
    ("suggestion_rule_recent", "triage_suggestion", "rule", "WHERE rule = 'needs-review'"),
    ("review_state_recent", "triage_review", "state", ""),
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS trajectory_ingested_at timestamptz")
        schema_editor.execute(
            f"UPDATE {table} AS row SET trajectory_ingested_at = trajectory.ingested_at "
            f"FROM ingest_trajectory AS trajectory WHERE trajectory.id = row.trajectory_id"
        )
        # Every row has a trajectory (a foreign key): a NULL here would hide the row from a filtered list.
        schema_editor.execute(f"ALTER TABLE {table} ALTER COLUMN trajectory_ingested_at SET NOT NULL")
        schema_editor.execute(
            f"CREATE TRIGGER {table}_ingested_at BEFORE INSERT OR UPDATE OF trajectory_id ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION trajectory_ingested_at_copy()"
        )
        # Fired under session_replication_role = replica too (the load generator's COPY sets it).
        schema_editor.execute(f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER {table}_ingested_at")
    for name, table, column, condition in INDEXES:
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
            f"({column}, trajectory_ingested_at DESC, trajectory_id DESC) {condition}"
        )
        schema_editor.execute(f"ANALYZE {table}")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, *_ in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_ingested_at ON {table}")
        schema_editor.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS trajectory_ingested_at")


class Migration(migrations.Migration):
    dependencies = [("ingest", "0010_trajectory_order_copies"), ("triage", "0007_review_done_recent")]
    operations = [migrations.RunPython(create, drop)]
