"""Property-based: real records mutated by type, shape and encoding never escape, and nothing good is lost.

Each property runs a small, derandomized budget here; `bench/fuzz_ingest.py --examples 5000` runs
the same ones long. See `fuzzing.py` for the mutations and the invariants.
"""

from __future__ import annotations

import os

import pytest

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from tests.flywheel.ingest import fuzzing

pytestmark = [pytest.mark.django_db, pytest.mark.slow]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))


def fail(example: object, problems: list[str]) -> None:
    raise AssertionError(f"{problems} for {example!r}")


@pytest.fixture
def token(make_user) -> str:
    return api_token_create(user=make_user(Role.REVIEWER), name="fuzz")[1]


@pytest.mark.parametrize("format_name", list(fuzzing.FORMATS))
def test_the_upload_path_stores_every_good_line_and_reports_every_bad_one(format_name):
    strategy = fuzzing.hostile_files((format_name,))
    ran = fuzzing.run_property(strategy, fuzzing.check_upload, examples=EXAMPLES, derandomize=True, on_problems=fail)
    assert ran == EXAMPLES


@pytest.mark.parametrize("envelope", [False, True], ids=["lines", "envelope"])
def test_the_api_gives_every_item_its_own_result(client, token, envelope):
    strategy = fuzzing.hostile_files(containers=not envelope, truncate=not envelope)
    ran = fuzzing.run_property(
        strategy, lambda hostile: fuzzing.check_api(client, token, hostile, envelope=envelope),
        examples=EXAMPLES, derandomize=True, on_problems=fail,
    )  # fmt: skip
    assert ran == EXAMPLES


def test_the_otlp_receiver_refuses_bad_spans_alone_and_no_trace_freezes(client, token):
    ran = fuzzing.run_property(
        fuzzing.hostile_exports(), lambda hostile: fuzzing.check_otlp(client, token, hostile),
        examples=EXAMPLES, derandomize=True, on_problems=fail,
    )  # fmt: skip
    assert ran == EXAMPLES


def test_openinference_spans_spoiled_one_at_a_time_cost_only_their_span(client, token):
    """The same invariant on what openinference-instrumentation-openai really exports (flattened messages)."""
    ran = fuzzing.run_property(
        fuzzing.hostile_exports(fuzzing.openinference_export),
        lambda hostile: fuzzing.check_otlp(client, token, hostile),
        examples=EXAMPLES, derandomize=True, on_problems=fail,
    )  # fmt: skip
    assert ran == EXAMPLES


def test_the_checks_catch_a_lost_good_line(monkeypatch):
    """The invariant has teeth: a store that drops the last good record is reported."""
    from flywheel.ingest import services

    real = services._store_batch

    def store_all_but_last(batch, options, agents):
        return real(batch[:-1], options, agents) + [services.ItemResult(batch[-1].line, "duplicate")] if batch else []

    monkeypatch.setattr(services, "_store_batch", store_all_but_last)
    hostile = fuzzing.HostileFile(
        fuzzing.FORMATS["native"], "fuzz-teeth", [b'{"id": "a", "steps": [{"kind": "user", "text": "x"}]}'], {1: "a"}
    )
    assert fuzzing.check_upload(hostile) == ["good records not stored: ['a']"]
