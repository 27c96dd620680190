"""Jobs carry a dispatched-at mark: the outbox sweeper re-sends a queued job whose message may be lost."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("training", "0004_job_mine"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="state",
            field=models.CharField(
                choices=[
                    ("queued", "Queued, waiting for a worker"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                db_index=True,
                default="queued",
                max_length=12,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="dispatched_at",
            field=models.DateTimeField(
                blank=True, null=True, help_text="When its run message was last handed to the broker."
            ),
        ),
    ]
