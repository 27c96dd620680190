"""Text searches on a fresh SQLite database; prints each search's external ids, newest first, as JSON.

Run in its own process (the suite runs on PostgreSQL): `DATABASE_URL=sqlite:///... python -m
tests.flywheel.ingest.sqlite_text_search`. Used by test_text_search.py.
"""

from __future__ import annotations

import json

import django

SEARCHES = ("refun", "refund issued", '"refun"', "a & b")


def main() -> dict[str, list[str]]:
    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from flywheel.ingest.selectors import TrajectoryFilters, trajectory_page
    from tests.flywheel.ingest.test_views import native, store

    call_command("migrate", verbosity=0)
    viewer = User.objects.create_user(username="admin", is_superuser=True)
    store([native("t0", final_result="refunded already"), native("t1", final_result="Refund issued"),
           native("t2", final_result="a & b")])  # fmt: skip
    return {
        text: [row.external_id for row in trajectory_page(filters=TrajectoryFilters(text=text), viewer=viewer,
                                                          after=None, size=10)[0]]
        for text in SEARCHES
    }  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(main()))
