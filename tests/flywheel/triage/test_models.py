from __future__ import annotations

import pytest
from django.core.management import call_command

from flywheel.triage.models import BUILT_IN_BUCKETS, Bucket
from flywheel.triage.services import buckets_built_in_ensure


@pytest.mark.django_db
def test_the_migration_creates_the_guides_seven_buckets_in_order():
    buckets = list(Bucket.objects.values_list("slug", "built_in"))
    assert buckets == [(slug, True) for slug, *_ in BUILT_IN_BUCKETS]
    assert len(buckets) == 7


@pytest.mark.django_db(transaction=True)
def test_a_flushed_database_has_the_built_in_buckets_again_so_tests_after_a_transactional_one_find_them():
    # pytest-django flushes after each transactional test; under xdist such a test may run before others.
    Bucket.objects.create(slug="custom", name="Custom")
    call_command("flush", interactive=False, verbosity=0)
    buckets = list(Bucket.objects.values_list("slug", "name", "position"))
    assert buckets == [(slug, name, position) for position, (slug, name, *_) in enumerate(BUILT_IN_BUCKETS, start=1)]


@pytest.mark.django_db
def test_ensuring_the_built_in_buckets_creates_only_the_missing_ones_and_keeps_a_teams_edits():
    Bucket.objects.filter(slug="wrong_tool").update(name="Picked the wrong tool", colour="#000000")
    Bucket.objects.filter(slug="bad_planning").delete()
    assert buckets_built_in_ensure() == 1
    assert Bucket.objects.get(slug="wrong_tool").name == "Picked the wrong tool"
    assert Bucket.objects.get(slug="bad_planning").position == 3
    assert buckets_built_in_ensure() == 0
