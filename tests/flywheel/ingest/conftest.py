from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

TAU_BENCH = REPO_ROOT.parent / "shared" / "external" / "tau_bench" / "gpt-4o-airline.json"
TAU_MAPPING = {"messages": "traj", "outcome": "reward", "id": "task_id,trial"}


@pytest.fixture
def tau_bench_path() -> Path:
    if not TAU_BENCH.exists():
        pytest.fail(f"{TAU_BENCH} is missing: the suite reads ../shared/external")
    return TAU_BENCH
