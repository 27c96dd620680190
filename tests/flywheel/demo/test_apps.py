"""The demo app sits on top: it hears finished jobs through training's signal, and no other app imports it."""

from __future__ import annotations

import ast
from pathlib import Path

from flywheel.training.signals import job_finished
from tests.conftest import REPO_ROOT

FLYWHEEL = REPO_ROOT / "flywheel"


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # from flywheel import demo
    return names


def test_the_demo_moves_on_when_a_job_finishes():
    assert any(lookup_key[0] == "demo.on_job_finished" for lookup_key, *_ in job_finished.receivers)


def test_no_other_app_imports_the_demo():
    others = sorted(path for path in FLYWHEEL.rglob("*.py") if FLYWHEEL / "demo" not in path.parents)
    importers = [
        str(path.relative_to(REPO_ROOT))
        for path in others
        if any(name == "flywheel.demo" or name.startswith("flywheel.demo.") for name in imported_modules(path))
    ]
    assert len(others) > 50 and importers == []
