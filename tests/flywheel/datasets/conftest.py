from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.conftest import REPO_ROOT

EXTERNAL = REPO_ROOT.parent / "shared" / "external"
BFCL = EXTERNAL / "bfcl"
WORKBENCH = EXTERNAL / "workbench" / "processed" / "queries_and_answers"


def run_command(name: str, *args: str) -> dict:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def import_file(path: Path, format_name: str, split: str) -> dict:
    return run_command("import_tasks", str(path), "--format", format_name, "--split", split)


@pytest.fixture
def bfcl_simple() -> Path:
    return BFCL / "BFCL_v4_simple_python.json"
