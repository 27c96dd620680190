"""Create the role groups (viewer, reviewer, trainer, approver, admin) and their permissions."""

from django.db import migrations


def create_roles(apps, schema_editor):
    from flywheel.core.services import roles_sync

    roles_sync(apps=apps)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
