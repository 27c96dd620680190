from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def run_ingest(*args: str) -> dict:
    out = StringIO()
    call_command("ingest", *args, stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def test_the_tau_bench_command_prints_stored_then_duplicates(tau_bench_path):
    args = [
        str(tau_bench_path),
        "--format",
        "openai-chat",
        "--map",
        "messages=traj",
        "outcome=reward",
        "id=task_id,trial",
    ]
    assert run_ingest(*args)["stored"] == 200
    assert run_ingest(*args)["duplicates"] == 200


def test_a_bad_mapping_fails_before_reading(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("{}\n")
    with pytest.raises(CommandError, match="KEY=FIELD"):
        call_command("ingest", str(path), "--map", "nonsense")
    with pytest.raises(CommandError, match="unknown mapping key"):
        call_command("ingest", str(path), "--map", "colour=red")


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="is not a file"):
        call_command("ingest", str(tmp_path / "absent.jsonl"))


def test_errors_list_only_the_first_hundred(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("nope\n" * 150)
    report = run_ingest(str(path))
    assert report["rejected"] == 150 and len(report["errors"]) == 100
