"""Create the guide's seven failure buckets."""

from django.db import migrations


def create_buckets(apps, schema_editor):
    from flywheel.triage.models import BUILT_IN_BUCKETS

    bucket_model = apps.get_model("triage", "Bucket")
    for position, (slug, name, description, colour) in enumerate(BUILT_IN_BUCKETS, start=1):
        bucket_model.objects.update_or_create(
            slug=slug,
            defaults={"name": name, "description": description, "colour": colour, "built_in": True, "position": position},
        )


class Migration(migrations.Migration):
    dependencies = [("triage", "0001_initial")]
    operations = [migrations.RunPython(create_buckets, migrations.RunPython.noop)]
