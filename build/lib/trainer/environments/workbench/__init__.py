"""The WorkBench workplace sandbox: five tables, 27 tools, end-state judgement.

- `data`: WorkBench's starting tables, read once per folder (`$FLYWHEEL_WORKBENCH_DIR`).
- `state`: one episode's copy-on-write tables.
- `tools/`: the 27 tools, as NeMo Gym's workplace assistant names and behaves them.
- `dispatch`: a call to a tool run, checking the tool and arguments against the task's schemas.
- `compare`: the end-state comparison the judge uses.
- `environment`: WorkbenchEnvironment and `score_calls`.
Pure Python: no pandas, no torch.
"""

from __future__ import annotations

from trainer.environments.workbench.data import ENV_VAR, WorkbenchData, WorkbenchDataMissing, load_data
from trainer.environments.workbench.environment import DEFAULT_MAX_TURNS, WorkbenchEnvironment, score_calls

__all__ = [
    "DEFAULT_MAX_TURNS",
    "ENV_VAR",
    "WorkbenchData",
    "WorkbenchDataMissing",
    "WorkbenchEnvironment",
    "load_data",
    "score_calls",
]
