"""API tokens get scopes (ingest, read, train) and an optional expiry.

Tokens made before this keep every scope and no expiry, so no client stops working on upgrade.
"""

from django.db import migrations, models

ALL_SCOPES = ["ingest", "read", "train"]


def grant_all_scopes(apps, schema_editor):
    apps.get_model("core", "ApiToken").objects.update(scopes=ALL_SCOPES)


class Migration(migrations.Migration):
    dependencies = [("core", "0003_agent_members")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=models.JSONField(default=list, help_text="What the token may do: a list of ingest, read, train."),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, help_text="Empty: the token never expires.", null=True),
        ),
        migrations.RunPython(grant_all_scopes, migrations.RunPython.noop),
    ]
