from __future__ import annotations

import pytest

from flywheel.triage.models import BUILT_IN_BUCKETS, Bucket


@pytest.mark.django_db
def test_the_migration_creates_the_guides_seven_buckets_in_order():
    buckets = list(Bucket.objects.values_list("slug", "built_in"))
    assert buckets == [(slug, True) for slug, *_ in BUILT_IN_BUCKETS]
    assert len(buckets) == 7
