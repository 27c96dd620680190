"""Fixtures for the environment tests: WorkBench's data, its 690 tasks as the app imports them, small tasks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from flywheel.datasets.importers import read
from trainer.contracts import ExpectedCall, Task, openai_tool
from trainer.environments.workbench import WorkbenchData, WorkbenchEnvironment, load_data
from trainer.environments.workbench.state import WorkbenchState

EXTERNAL = Path(__file__).resolve().parents[4] / "shared" / "external"
WORKBENCH = EXTERNAL / "workbench"
WORKPLACE = EXTERNAL / "nemo_gym" / "workplace_assistant"
QUERIES = WORKBENCH / "processed" / "queries_and_answers"


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: the environment tests read ../shared/external")
    return path


@pytest.fixture(scope="session")
def workbench_data() -> WorkbenchData:
    return load_data(_require(WORKBENCH))


@pytest.fixture
def environment(workbench_data: WorkbenchData) -> WorkbenchEnvironment:
    return WorkbenchEnvironment(workbench_data)


@pytest.fixture
def state(workbench_data: WorkbenchData) -> WorkbenchState:
    """A fresh sandbox, for calling the tools directly."""
    return WorkbenchState.fresh(workbench_data)


@pytest.fixture(scope="session")
def workplace_tools() -> list[dict]:
    """The 27 tool schemas of NeMo Gym's workplace assistant, in OpenAI form."""
    first = json.loads(_require(WORKPLACE / "example.jsonl").read_text(encoding="utf-8").splitlines()[0])
    return [openai_tool(tool) for tool in first["responses_create_params"]["tools"]]


@pytest.fixture(scope="session")
def workbench_tasks() -> list[Task]:
    """All 690 WorkBench tasks, made by the web app's importer and read back as native task JSON."""
    tasks = []
    for path in sorted(_require(QUERIES).glob("*.csv")):
        for candidate in read(path, "workbench"):
            assert candidate.task is not None, candidate.error
            tasks.append(Task.from_json(json.loads(candidate.task.to_json_line())))
    return tasks


@pytest.fixture
def make_task(workplace_tools: list[dict]) -> Callable[..., Task]:
    """make_task(*expected ExpectedCall, id=...) -> a workplace task offering the 27 tools."""

    def make(*expected: ExpectedCall, id: str = "task-1") -> Task:
        return Task(
            id=id,
            messages=[{"role": "user", "content": "a workplace request"}],
            tools=workplace_tools,
            expected_calls=list(expected),
            no_call_expected=not expected,
        )

    return make
