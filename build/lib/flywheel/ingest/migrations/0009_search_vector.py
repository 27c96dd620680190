"""On PostgreSQL, a word index of the trajectory search text: a generated `tsvector` column with a GIN index.

The trigram index (0008) serves substring search, but a word in 0.1% to 10% of trajectories
hands it thousands of candidate rows that PostgreSQL rereads whole (each up to 20,000 characters)
to test the LIKE: 0.5 to 0.7 s at 1,000,000 trajectories. A tsvector match is exact, so the GIN
index's rows need no such recheck. The `simple` configuration: tool names, ids and code-like
tokens are kept as written (lowercased), no stemming and no stop words. ASCII punctuation becomes a
space first: PostgreSQL's parser would keep `window.pwned`, `user@example.com`, a path or `12.5` as
one word, and a search for `pwned` or `example` would miss them.

A stored generated column, not a trigger: PostgreSQL computes it on every INSERT, UPDATE and
COPY, which name only the model's columns, so the ingest path and the load generator need no
change and it can never drift from `search_text`. It is not a model field (SQLite, the
embedded default, has no tsvector; `flywheel.ingest.selectors` reads it by name). Adding it
rewrites the table and rebuilds its indexes once, under an exclusive lock: 13.4 minutes at
1,000,000 trajectories on a busy 2-core machine (README, load section).
"""

from django.db import migrations


def create_column(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE ingest_trajectory ADD COLUMN IF NOT EXISTS search_vector tsvector "
        "GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, regexp_replace(search_text, '[[:punct:]]+', ' ', 'g'))) "
        "STORED"
    )
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS trajectory_search_vector ON ingest_trajectory USING gin (search_vector)"
    )
    # The planner walks the newest rows for a word it thinks common and reads the index for a rare
    # one. At the default target ANALYZE keeps the 1,000 commonest words (down to about 1.3% of rows
    # at 1,000,000) and guesses half that for any other: a word in no row then walked every row
    # (4 s). At 1,000 it keeps about 3,200 (down to 0.08%); ANALYZE took 4 s more.
    schema_editor.execute("ALTER TABLE ingest_trajectory ALTER COLUMN search_vector SET STATISTICS 1000")
    schema_editor.execute("ANALYZE ingest_trajectory (search_vector)")


def drop_column(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP INDEX IF EXISTS trajectory_search_vector")
    schema_editor.execute("ALTER TABLE ingest_trajectory DROP COLUMN IF EXISTS search_vector")


class Migration(migrations.Migration):
    dependencies = [("ingest", "0008_search_upper_trigram_index")]
    operations = [migrations.RunPython(create_column, drop_column)]
