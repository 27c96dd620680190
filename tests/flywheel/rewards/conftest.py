"""Reward profiling fixtures: real BFCL tasks in a snapshot, and outputs written from their answers.

The outputs are built from each task's real ground truth, in four kinds that a reviewer can
tell apart at a glance: the right call, the right tool with one wrong argument, a wrong tool,
and text that is not valid JSON. Which kind a task gets is fixed by its position.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from flywheel.core.models import Agent
from flywheel.core.services import agent_create
from flywheel.datasets import importers
from flywheel.datasets.models import Split, TaskSetSnapshot
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.rewards import services
from flywheel.rewards.models import OutputSource, ProfileRun
from flywheel.rewards.services import Scoring
from tests.conftest import REPO_ROOT
from trainer.verifiers.safety import SafetyPolicy

BFCL_SIMPLE = REPO_ROOT.parent / "shared" / "external" / "bfcl" / "BFCL_v4_simple_python.json"
KINDS = ("right", "wrong_argument", "wrong_tool", "broken")
# Stricter than the default: BFCL's many calculate_* tools become denied, so right calls lose the safety part.
STRICT_POLICY: dict[str, Any] = {
    **SafetyPolicy.default().to_json(),
    "name": "strict-no-calculators",
    "denied_tools": ["calculate_*"],
}


def default_scoring(verifier: str = "tool_call", environment: str = "") -> Scoring:
    return Scoring(verifier=verifier, policy=SafetyPolicy.default().to_json(), environment=environment)


def strict_scoring() -> Scoring:
    return Scoring(verifier="tool_call", policy=STRICT_POLICY)


def bfcl_head(count: int, folder: Path, source: Path = BFCL_SIMPLE) -> Path:
    """The first `count` questions of a BFCL file and their answers, copied into `folder` (importing
    all 400 takes seconds per test; a hundred-odd real tasks are enough to sample 100 from)."""
    (folder / "possible_answer").mkdir(parents=True, exist_ok=True)
    for relative in (Path(source.name), Path("possible_answer") / source.name):
        lines = (source.parent / relative).read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / relative).write_text("".join(lines[:count]), encoding="utf-8")
    return folder / source.name


def bfcl_snapshot(path: Path, name: str = "bfcl simple") -> TaskSetSnapshot:
    """All of a BFCL file's tasks, imported into train and frozen in a snapshot."""
    report = tasks_import(
        actor=None, candidates=importers.read(path, "bfcl"), split=Split.TRAIN, agent=None, source_ref=path.name
    )
    assert report.imported > 0 and report.refused == report.rejected == 0, report.errors
    return snapshot_create(actor=None, name=name, split=Split.TRAIN)


def _first_value(alternatives: list[Any]) -> tuple[bool, Any]:
    """(present, value): the first accepted value; an argument whose only answer is "" is left out."""
    for value in alternatives:
        if value != "":
            return True, value
    return False, None


def right_call(expected: dict[str, Any]) -> dict[str, Any]:
    arguments = {}
    for name, alternatives in expected["arguments"].items():
        present, value = _first_value(alternatives)
        if present:
            arguments[name] = value
    return {"name": expected["name"], "arguments": arguments}


def output_of(kind: str, content: dict[str, Any]) -> str:
    call = right_call(content["expected_calls"][0])
    if kind == "wrong_argument" and call["arguments"]:
        first = next(iter(call["arguments"]))
        call["arguments"][first] = "certainly-not-the-answer"
    elif kind == "wrong_tool":
        call["name"] = "not_a_tool_of_this_task"
    elif kind == "broken":
        return '{"name": "' + call["name"] + '", "arguments": {'
    return json.dumps(call)


def outputs_lines(snapshot: TaskSetSnapshot) -> list[str]:
    """One output line per task of the snapshot, in the verify CLI's {"id", "output"} format."""
    lines = []
    for item in snapshot.items.order_by("position"):
        kind = KINDS[item.position % len(KINDS)]
        lines.append(json.dumps({"id": item.content["id"], "output": output_of(kind, item.content)}))
    return lines


def outputs_file(snapshot: TaskSetSnapshot) -> io.BytesIO:
    data = io.BytesIO(("\n".join(outputs_lines(snapshot)) + "\n").encode())
    data.name = "bfcl-outputs.jsonl"
    return data


@pytest.fixture(autouse=True)
def fast_password_hashing(settings) -> None:
    """make_user hashes a password per user; the production hasher's rounds would dominate these tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


BFCL_TASKS = 40
BFCL_MANY = 120


@pytest.fixture
def bfcl(tmp_path) -> TaskSetSnapshot:
    """The first 40 real BFCL simple_python tasks in one snapshot (ten of them call calculate_* tools)."""
    return bfcl_snapshot(bfcl_head(BFCL_TASKS, tmp_path / "bfcl"))


@pytest.fixture
def bfcl_many(tmp_path) -> TaskSetSnapshot:
    """The first 120 real BFCL simple_python tasks: enough to sample 100 outputs from."""
    return bfcl_snapshot(bfcl_head(BFCL_MANY, tmp_path / "bfcl"))


JUDGED_OUTPUTS = 50


@pytest.fixture
def judged_agent() -> Agent:
    return agent_create(actor=None, name="judged-bot")


@pytest.fixture
def judged_run(judged_agent, tmp_path) -> ProfileRun:
    """50 real BFCL tasks of the agent, each with an output scored by the tool_call verifier."""
    path = bfcl_head(JUDGED_OUTPUTS, tmp_path / "bfcl")
    tasks_import(
        actor=None, candidates=importers.read(path, "bfcl"), split=Split.TRAIN, agent=judged_agent, source_ref="b"
    )
    snapshot = snapshot_create(actor=None, name="judged train", split=Split.TRAIN, agent=judged_agent)
    return services.profile_create(actor=None, snapshot=snapshot, scoring=default_scoring(),
                                   source_kind=OutputSource.UPLOAD, sample_size=JUDGED_OUTPUTS,
                                   lines=outputs_lines(snapshot))  # fmt: skip
