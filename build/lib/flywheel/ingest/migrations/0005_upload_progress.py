"""Uploads resume and are re-sent (attempts, heartbeat, lines read, dispatched-at); a partly read file ends
`partial`; dedup keys are per agent."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0004_otlp_span"),
    ]

    operations = [
        migrations.AddField(
            model_name="upload",
            name="attempts",
            field=models.PositiveSmallIntegerField(default=0, help_text="Workers that have claimed it so far."),
        ),
        migrations.AddField(
            model_name="upload",
            name="heartbeat_at",
            field=models.DateTimeField(
                blank=True, null=True, help_text="When its worker last committed progress; stale means lost."
            ),
        ),
        migrations.AddField(
            model_name="upload",
            name="dispatched_at",
            field=models.DateTimeField(
                blank=True, null=True, help_text="When its processing message was last handed to the broker."
            ),
        ),
        migrations.AddField(
            model_name="upload",
            name="lines_read",
            field=models.IntegerField(
                default=0, help_text="The line of the last record committed; a resumed run continues after it."
            ),
        ),
        migrations.AlterField(
            model_name="upload",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued, waiting for a worker"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("partial", "Partly read"),
                    ("failed", "Failed"),
                ],
                db_index=True,
                default="queued",
                max_length=16,
            ),
        ),
        migrations.RemoveConstraint(model_name="trajectory", name="trajectory_unique_source_id"),
        migrations.RemoveConstraint(model_name="trajectory", name="trajectory_unique_content"),
        migrations.AddConstraint(
            model_name="trajectory",
            constraint=models.UniqueConstraint(
                condition=models.Q(("external_id", ""), _negated=True),
                fields=("agent", "source", "external_id"),
                name="trajectory_unique_agent_source_id",
            ),
        ),
        migrations.AddConstraint(
            model_name="trajectory",
            constraint=models.UniqueConstraint(
                condition=models.Q(("external_id", "")),
                fields=("agent", "content_hash"),
                name="trajectory_unique_agent_content",
            ),
        ),
    ]
