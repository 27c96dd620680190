"""On the embedded SQLite default, concurrent writers wait for each other instead of failing.

The suite runs on PostgreSQL, so this runs `sqlite_promotes.py` in its own process on a fresh
SQLite file: ten approvers promote the same version at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.flywheel.registry.conftest import make_adapter

pytestmark = pytest.mark.slow


def test_ten_concurrent_promotes_on_sqlite_make_one_deployment_and_no_error(tmp_path):
    adapter = make_adapter(tmp_path / "adapter", seed=1)
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REGISTRY_DIR": str(tmp_path / "registry"),
        "MEDIA_ROOT": str(tmp_path / "media"),
        "DJANGO_SETTINGS_MODULE": "flywheel.settings",
    }
    run = subprocess.run(
        [sys.executable, "-m", "tests.flywheel.core.sqlite_promotes", str(adapter)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(result["outcomes"]) == ["already live"] * 9 + ["deployed"], result["outcomes"]
    assert result["deployments"] == 1
