from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from flywheel.core.models import AuditEvent
from flywheel.triage.models import Review, Suggestion

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("suggest_buckets", *args, stdout=out)
    return out.getvalue()


def test_suggest_buckets_catches_up_then_recomputes_all_with_the_flag(tau_airline):
    Suggestion.objects.all().delete()
    Review.objects.filter(trajectory__external_id__in=["0:0", "15:0"]).delete()
    assert run() == "suggestions computed for 2 trajectories\n"
    assert Suggestion.objects.count() == 2
    assert run() == "suggestions computed for 0 trajectories\n"
    assert run("--all") == "suggestions computed for 200 trajectories\n"
    assert Suggestion.objects.count() == 116
    assert AuditEvent.objects.filter(action="suggestions.recompute", actor=None).count() == 3
