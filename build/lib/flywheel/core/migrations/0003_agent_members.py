"""Agent members and teams, and the all-agents grant.

Every user that exists when this runs gets the all-agents grant (`Perm.ALL_AGENTS`), so that
upgrading an install locks nobody out of the agents they saw before; new users see no agent until
they are made members (or given the grant). The admin role carries the grant too.
"""

from django.conf import settings
from django.db import migrations, models

from flywheel.core.roles import Perm


def grant_existing_users_all_agents(apps, schema_editor):
    from flywheel.core.services import roles_sync

    roles_sync(apps=apps)  # creates the all-agents permission and gives it to the admin role
    permission = apps.get_model("auth", "Permission").objects.get(
        content_type__app_label="core", codename=Perm.ALL_AGENTS.codename
    )
    user_model = apps.get_model(settings.AUTH_USER_MODEL)
    through = user_model.user_permissions.through
    rows = [through(user_id=pk, permission_id=permission.pk) for pk in user_model.objects.values_list("pk", flat=True)]
    through.objects.bulk_create(rows, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0002_roles"),
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="members",
            field=models.ManyToManyField(
                blank=True,
                help_text="Users who see and act on this agent's data (users with access to every agent do anyway).",
                related_name="member_agents",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="teams",
            field=models.ManyToManyField(
                blank=True,
                help_text="Groups whose every user is a member.",
                related_name="agents",
                to="auth.group",
            ),
        ),
        migrations.AlterModelOptions(
            name="capability",
            options={
                "default_permissions": (),
                "managed": False,
                "permissions": [
                    ("view_flywheel", "Can view trajectories, tasks, jobs, models and dashboards"),
                    ("ingest_trajectories", "Can upload and send trajectories"),
                    ("triage_trajectories", "Can review and bucket trajectories"),
                    ("edit_tasks", "Can create and edit regression tasks and task sets"),
                    ("launch_jobs", "Can launch, cancel and retry evaluation and training jobs"),
                    ("approve_versions", "Can approve, promote and roll back model versions"),
                    ("view_audit", "Can read the audit log"),
                    ("manage_flywheel", "Can manage agents, buckets, policies and gate criteria"),
                    (
                        "access_all_agents",
                        "Can see and act on every agent's data (others: the agents they are members of)",
                    ),
                ],
            },
        ),
        migrations.RunPython(grant_existing_users_all_agents, migrations.RunPython.noop),
    ]
