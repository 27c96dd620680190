"""The demo's management commands (`demo_data`, `flywheel_demo`)."""

from __future__ import annotations

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_the_demo_data_command_says_where_the_data_is_missing(settings, tmp_path):
    settings.SHARED_EXTERNAL_DIR = tmp_path / "nothing-here"
    with pytest.raises(Exception, match="no third-party data"):
        call_command("demo_data")
