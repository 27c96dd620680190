from __future__ import annotations

import ast
import gzip
import io
import json
from pathlib import Path
from unittest import mock

import pytest

from flywheel.core.roles import Role
from flywheel.ingest import services
from flywheel.ingest.models import Step, Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.ingest.signals import feedback_received, trajectories_stored
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = pytest.mark.django_db
TAU = IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING), agent="airline")


def native_line(external_id: str | None = None, **extra) -> bytes:
    record = {"steps": [{"kind": "user", "text": f"hello {external_id}"}], **extra}
    if external_id is not None:
        record["id"] = external_id
    return json.dumps(record).encode() + b"\n"


NATIVE = IngestOptions(format="native")


def ingest(data: bytes, options: IngestOptions = NATIVE) -> dict:
    return stream_ingest(stream=io.BytesIO(data), options=options).as_dict()


def test_the_tau_bench_file_is_stored_whole_then_seen_as_duplicates(tau_bench_path):
    with tau_bench_path.open("rb") as stream:
        first = stream_ingest(stream=stream, options=TAU).as_dict()
    assert first == {"read": 200, "stored": 200, "duplicates": 0, "rejected": 0, "errors": []}
    assert Trajectory.objects.filter(outcome="failure").count() == 116
    assert Step.objects.filter(kind="tool_call").count() == Step.objects.filter(kind="tool_result").count() == 1164
    trajectory = Trajectory.objects.get(source="airline", external_id="0:0")
    calls = trajectory.steps.filter(kind="tool_call").order_by("index")
    assert calls[0].tool_name == "get_user_details" and calls[0].tool_arguments == {"user_id": "mia_li_3668"}
    assert trajectory.metadata["info"]["task"]["actions"]
    with tau_bench_path.open("rb") as stream:
        second = stream_ingest(stream=stream, options=TAU).as_dict()
    assert (second["stored"], second["duplicates"]) == (0, 200)


def test_records_without_an_id_dedupe_on_content():
    assert ingest(native_line() + native_line() + native_line(model_version="v2"))["stored"] == 2
    assert ingest(native_line())["duplicates"] == 1


def test_the_same_id_in_another_source_is_another_trajectory():
    assert ingest(native_line("a"), IngestOptions(source="one"))["stored"] == 1
    assert ingest(native_line("a"), IngestOptions(source="two"))["stored"] == 1
    assert ingest(native_line("a"), IngestOptions(source="two"))["duplicates"] == 1


def test_bad_lines_are_rejected_with_their_line_and_the_rest_is_stored():
    data = b"".join(
        [
            b"\xef\xbb\xbf" + native_line("1"),
            b"not json\n",
            b'{"bad": "\xff"}\n',
            b"[1]\n",
            native_line("2"),
            b'{"steps": []}\n',
            b'{"n": ' + b"1" * 5000 + b"}\n",
            b'{"x": NaN}\n',
            b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}\n",
            native_line("3"),
            b'{"steps": [{"kind": "user", "text": "cut',
        ]
    )
    report = ingest(data)
    assert (report["read"], report["stored"], report["rejected"]) == (11, 3, 8)
    reasons = {error["line"]: error["reason"] for error in report["errors"]}
    assert sorted(reasons) == [2, 3, 4, 6, 7, 8, 9, 11]
    assert "invalid UTF-8" in reasons[3] and "non-empty 'steps'" in reasons[6] and "truncated" in reasons[11]
    assert set(Trajectory.objects.values_list("external_id", flat=True)) == {"1", "2", "3"}


def test_an_empty_file_is_reported_and_stores_nothing():
    report = ingest(b"")
    assert report["failure"] == "the file is empty" and report["stored"] == 0


def test_a_gzip_over_the_cap_keeps_what_came_before(settings):
    settings.INGEST_MAX_DECOMPRESSED_BYTES = 5_000
    settings.INGEST_BATCH_SIZE = 10
    report = ingest(gzip.compress(b"".join(native_line(str(n)) for n in range(1000))))
    assert "decompressed size exceeds the cap" in report["failure"]
    assert 50 <= report["stored"] < 1000 and report["stored"] == Trajectory.objects.count()


def test_a_rejected_record_leaves_no_steps_behind():
    ingest(b'{"id": "x", "steps": [{"kind": "user", "text": "ok"}, {"kind": "bogus"}]}\n')
    assert not Trajectory.objects.exists() and not Step.objects.exists()


def test_a_concurrent_writer_turns_the_batch_into_duplicates_not_errors(monkeypatch):
    ingest(native_line("raced"))
    monkeypatch.setattr(services, "_existing_keys", lambda batch: {})
    report = ingest(native_line("raced") + native_line("fresh"))
    assert (report["stored"], report["duplicates"]) == (1, 1)
    assert Step.objects.count() == 2


def test_the_agent_is_created_from_the_record_or_the_default():
    ingest(native_line("a", agent="support-bot") + native_line("b"))
    agents = dict(Trajectory.objects.values_list("external_id", "agent__name"))
    assert agents == {"a": "support-bot", "b": "default"}


def test_an_agent_name_that_is_not_a_slug_is_rejected():
    report = ingest(native_line("a", agent="my agent!"))
    assert "agent name 'my agent!'" in report["errors"][0]["reason"]


def test_memory_stays_flat_on_a_large_json_array(settings):
    import tracemalloc

    settings.INGEST_BATCH_SIZE = 100
    items = b",".join(native_line(str(n)).strip() for n in range(3000))
    tracemalloc.start()
    stream_ingest(stream=io.BytesIO(b"[" + items + b"]"), options=IngestOptions())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert Trajectory.objects.count() == 3000
    assert peak < 40 * len(items) // 3  # far below a whole-file load of records and rows


# --- the trajectories_stored signal --------------------------------------------------------


@pytest.fixture
def send():
    """`trajectories_stored.send`, recorded; the apps that listen (triage) hear nothing here."""
    with mock.patch.object(trajectories_stored, "send") as send:
        yield send


def test_storing_announces_the_stored_ids_only_once_they_are_committed(send, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ingest(native_line("a") + native_line("b") + native_line("a"))
    send.assert_not_called()
    for callback in callbacks:
        callback()
    stored = list(Trajectory.objects.order_by("ingested_at").values_list("pk", flat=True))
    send.assert_called_once_with(sender=Trajectory, trajectory_ids=stored)


def test_a_batch_of_duplicates_announces_nothing(send, django_capture_on_commit_callbacks):
    ingest(native_line("a"))
    with django_capture_on_commit_callbacks(execute=True):
        ingest(native_line("a"))
    send.assert_not_called()


def test_a_listener_that_fails_never_fails_the_ingest_or_the_feedback(
    make_user, django_capture_on_commit_callbacks, caplog
):
    with mock.patch.object(trajectories_stored, "send", side_effect=RuntimeError("listener broke")), \
            django_capture_on_commit_callbacks(execute=True):  # fmt: skip
        ingest(native_line("a"))
    trajectory = Trajectory.objects.get(external_id="a")
    with mock.patch.object(feedback_received, "send", side_effect=RuntimeError("feedback listener broke")), \
            django_capture_on_commit_callbacks(execute=True):  # fmt: skip
        services.feedback_add(trajectory=trajectory, value="down", sent_by=make_user(Role.VIEWER))
    assert trajectory.feedback.count() == 1
    assert "listener broke" in caplog.text and "feedback listener broke" in caplog.text


def test_ingest_imports_no_app_above_it():
    """Ingest learns nothing of triage: triage connects to `trajectories_stored` instead (DESIGN.md, boundaries)."""
    for path in Path(services.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [name for name in names if name.startswith("flywheel.triage")], path
