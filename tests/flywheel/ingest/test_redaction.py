"""Redaction runs on RE2: linear time whatever pattern an ingest user sends, or the pattern is refused."""

from __future__ import annotations

import pytest
import re2
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.forms import UploadForm
from flywheel.ingest.redaction import BUILT_IN, Redactor

RE2_PROGRAM = type(re2.compile("x"))
UNSUPPORTED = [r"(a)\1", r"(?<!x)secret", r"token(?=\d)", r"(?!a)b"]


def test_every_pattern_built_in_or_custom_is_an_re2_program():
    redactor = Redactor.build(list(BUILT_IN), [r"(a+)+$", r"acct-\d{6}"])
    assert redactor.names() == [*BUILT_IN, "custom1", "custom2"]
    assert all(type(program) is RE2_PROGRAM for _, program in redactor.patterns)


def test_a_catastrophic_pattern_on_python_re_runs_once_over_the_text_on_re2():
    # (a+)+$ against a run of a's ended by b backtracks exponentially on Python's re; RE2 cannot backtrack.
    redactor = Redactor.build([], [r"(a+)+$"])
    assert redactor.redact({"note": "a" * 100_000 + "b"}) == ({"note": "a" * 100_000 + "b"}, 0)
    assert redactor.redact("xaaa") == ("x[REDACTED:custom1]", 1)


@pytest.mark.parametrize("pattern", UNSUPPORTED)
def test_a_pattern_re2_cannot_run_is_refused_with_the_reason(pattern):
    with pytest.raises(ValueError, match="cannot run on RE2 .*without backreferences or lookaround"):
        Redactor.build([], [pattern])


def test_the_phone_pattern_keeps_the_character_before_the_number():
    redactor = Redactor.build(["phone"])
    text = "call +1 415-555-0100,or (415) 555 0199; x4155550100 and 415-555-0100abc stay"
    redacted, count = redactor.redact(text)
    assert redacted == "call [REDACTED:phone],or ([REDACTED:phone]; x4155550100 and 415-555-0100abc stay"
    assert count == 2


def test_the_upload_form_refuses_a_lookaround_pattern():
    upload = SimpleUploadedFile("a.jsonl", b"{}\n")
    form = UploadForm(data={"format": "auto", "redact_custom": "ok-\\d+\n(?<=x)y"}, files={"file": upload})
    assert not form.is_valid()
    assert "cannot run on RE2" in form.errors["redact_custom"][0]


@pytest.mark.django_db
def test_the_api_refuses_a_backreference_pattern_with_400(client, make_user):
    token = api_token_create(user=make_user(Role.REVIEWER), name="agent")[1]
    url = reverse("ingest:api_trajectories") + "?redact_pattern=" + "(a)%5C1"
    response = client.post(url, data="[]", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 400 and "cannot run on RE2" in response.json()["error"]
