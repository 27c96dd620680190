"""Ten approvers promote the same version at once on a SQLite database; prints what each got, as JSON.

Run in its own process (the suite runs on PostgreSQL): `DATABASE_URL=sqlite:///... python -m
tests.flywheel.core.sqlite_promotes ADAPTER_DIR`. Each thread has its own connection, as web
workers would. Used by test_sqlite_writers.py.
"""

from __future__ import annotations

import json
import sys
import threading

import django

PROMOTERS = 10


def main(adapter_dir: str) -> dict[str, object]:
    django.setup()
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.db import connection

    from flywheel.core.roles import Role
    from flywheel.core.services import agent_create
    from flywheel.registry import services
    from flywheel.registry.models import Deployment, ModelVersion
    from tests.conftest import REPO_ROOT

    call_command("migrate", verbosity=0)
    approver = User.objects.create_user(username="approver")
    approver.groups.add(Group.objects.get(name=Role.APPROVER.value))
    agent = agent_create(actor=None, name="support-bot")
    version = services.version_register(actor=None, agent=agent, adapter_dir=adapter_dir,
                                        base_model=str(REPO_ROOT / "tests" / "fixtures" / "tiny-model"))  # fmt: skip
    connection.close()
    barrier = threading.Barrier(PROMOTERS)
    outcomes: list[str] = [""] * PROMOTERS

    def promote(index: int) -> None:
        try:
            user = User.objects.get(pk=approver.pk)
            mine = ModelVersion.objects.get(pk=version.pk)
            barrier.wait(timeout=30)
            deployment = services.version_promote(actor=user, version=mine, reason="at once")
            outcomes[index] = "deployed" if deployment else "already live"
        except Exception as error:  # noqa: BLE001 - reported to the test, which fails on any
            outcomes[index] = f"{type(error).__name__}: {error}"
        finally:
            connection.close()

    threads = [threading.Thread(target=promote, args=(index,)) for index in range(PROMOTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return {"outcomes": outcomes, "deployments": Deployment.objects.filter(agent=agent).count()}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
