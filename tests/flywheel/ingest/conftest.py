from __future__ import annotations

from tests.conftest import TAU_BENCH, tau_bench_path  # noqa: F401  (re-exported for older imports)

TAU_MAPPING = {"messages": "traj", "outcome": "reward", "id": "task_id,trial"}
