"""DESIGN.md's boundaries: trainer never imports Django or flywheel; the scoring modules never import torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

TRAINER = REPO_ROOT / "trainer"
TORCH_FREE = ["contracts.py", "parsing.py", "verifiers", "environments"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots if root.exists() for p in ([root] if root.is_file() else root.rglob("*.py")))


@pytest.mark.parametrize("path", python_files(TRAINER), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_trainer_never_imports_django_or_flywheel(path):
    assert not imported_modules(path) & {"django", "flywheel"}


@pytest.mark.parametrize(
    "path", python_files(*(TRAINER / name for name in TORCH_FREE)), ids=lambda p: str(p.relative_to(REPO_ROOT))
)
def test_the_scoring_modules_never_import_torch(path):
    assert not imported_modules(path) & {"torch", "transformers", "peft", "trl", "vllm"}


def test_the_import_scan_sees_a_django_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom django.conf import settings\n")
    assert "django" in imported_modules(sample)


def test_python_m_trainer_help_works_without_django():
    code = "import runpy, sys; sys.argv=['trainer', '--help']; runpy.run_module('trainer', run_name='__main__')"
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.modules['django'] = None; {code}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: python -m trainer" in result.stdout
