"""DESIGN.md's boundaries, checked on every import statement of the tree, function-level ones included.

1. `trainer` never imports Django or flywheel.
2. The app sees only the trainer's torch-free face: `flywheel` may import from `trainer` only
   `spec`, `contracts`, `parsing`, `verifiers` and `environments`. The face itself imports
   nothing of the trainer outside the face and none of torch, transformers, trl, peft, vllm,
   datasets or accelerate, at any depth (an import inside a function counts: it is one call away
   from loading torch into a web request). A fresh interpreter that imports every face module
   has none of them loaded, which also catches a heavy import hidden behind a third-party package.
3. Within the app the job path is one-way: in `flywheel.training`, services never import the
   runner and the runner never imports the tasks; the one edge back is services enqueueing a task
   after commit (`delay_on_commit`). `flywheel.ingest` knows no app above it (triage learns of stored
   trajectories through ingest's signal).

An AST walk rather than import-linter: the rule "only these five subpackages" is an allow-list
over every `trainer.*` import, and a test that prints the offending file and line is as cheap to
read as a contract file. The `test_the_checker_*` tests show that each rule fails when broken.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

TRAINER = REPO_ROOT / "trainer"
APP = REPO_ROOT / "flywheel"
FACE = ("spec", "contracts", "parsing", "verifiers", "environments")
HEAVY = ("torch", "transformers", "trl", "peft", "vllm", "datasets", "accelerate")
# Apps that ingest sits below: it may import core and itself only.
ABOVE_INGEST = ("triage", "datasets", "rewards", "training", "registry", "monitoring", "dashboards", "demo")


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    module: str  # the full dotted name imported from (or imported)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def imports_in(path: Path) -> list[Import]:
    """Every absolute import in the file, at any depth (module level, in functions, in classes)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(path, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend(Import(path, node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots if root.exists() for p in ([root] if root.is_file() else root.rglob("*.py")))


def face_files(trainer: Path) -> list[Path]:
    return python_files(*(trainer / name for name in ("spec", "verifiers", "environments")),
                        *(trainer / f"{name}.py" for name in ("contracts", "parsing")))


def top(module: str) -> str:
    return module.split(".")[0]


def trainer_part(module: str) -> str | None:
    """`spec` for `trainer.spec.kinds.config_class`; None for a module outside trainer."""
    parts = module.split(".")
    return parts[1] if parts[0] == "trainer" and len(parts) > 1 else ("" if parts[0] == "trainer" else None)


def outside_face(imports: list[Import]) -> list[Import]:
    return [found for found in imports if trainer_part(found.module) not in (None, *FACE)]


def app_violations(app: Path) -> list[Import]:
    """Imports in the app of any trainer module outside the face."""
    return [found for path in python_files(app) for found in outside_face(imports_in(path))]


def face_violations(trainer: Path) -> list[Import]:
    """Imports in the face of trainer modules outside it, or of a heavy package, at any depth."""
    return [
        found for path in face_files(trainer) for found in imports_in(path)
        if top(found.module) in HEAVY or trainer_part(found.module) not in (None, *FACE)
    ]  # fmt: skip


def edges(app: Path, package: str, names: tuple[str, ...]) -> set[tuple[str, str]]:
    """(importer, imported) among the modules `names` of the app's `package`."""
    found = set()
    for name in names:
        for item in imports_in(app / package / f"{name}.py"):
            for other in names:
                if other != name and item.module.startswith(f"flywheel.{package}.{other}"):
                    found.add((name, other))
    return found


def job_path_violations(app: Path) -> set[tuple[str, str]]:
    """Edges of training's job path that point back: services → runner, runner → tasks, tasks → nothing else."""
    allowed = {("tasks", "runner"), ("tasks", "services"), ("runner", "services"), ("services", "tasks")}
    return edges(app, "training", ("tasks", "runner", "services")) - allowed


def ingest_violations(app: Path) -> list[Import]:
    return [
        found for path in python_files(app / "ingest") for found in imports_in(path)
        if any(found.module.startswith(f"flywheel.{above}") for above in ABOVE_INGEST)
    ]  # fmt: skip


# --- The rules on this tree ---------------------------------------------------------------------


@pytest.mark.parametrize("path", python_files(TRAINER), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_trainer_never_imports_django_or_flywheel(path):
    assert not {top(found.module) for found in imports_in(path)} & {"django", "flywheel"}


def test_the_app_imports_only_the_trainers_face():
    assert [str(found) for found in app_violations(APP)] == []


def test_the_face_imports_nothing_heavy_and_nothing_outside_itself_at_any_depth():
    assert face_files(TRAINER), "the face's files were not found"
    assert [str(found) for found in face_violations(TRAINER)] == []


def test_importing_every_face_module_in_a_fresh_interpreter_loads_no_heavy_package():
    modules = [
        ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in face_files(TRAINER)
    ]
    code = (f"import importlib, sys\nfor name in {modules!r}: importlib.import_module(name)\n"
            f"print(sorted(name for name in sys.modules if name.split('.')[0] in {HEAVY!r}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_training_job_path_is_one_way():
    assert job_path_violations(APP) == set()


def test_ingest_knows_no_app_above_it():
    assert [str(found) for found in ingest_violations(APP)] == []


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


# --- Each checker fails on a tree that breaks its rule -------------------------------------------


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checker_catches_the_app_importing_the_trainers_torch_side(tmp_path):
    write(tmp_path, "flywheel/training/views.py", "from trainer.spec.kinds import config_class\n")
    assert app_violations(tmp_path / "flywheel") == []
    write(tmp_path, "flywheel/training/services.py", "def launch():\n    from trainer.grpo import run\n")
    write(tmp_path, "flywheel/demo/services.py", "import trainer.examples.learning.prepare\n")
    found = {(found.path.name, found.module) for found in app_violations(tmp_path / "flywheel")}
    assert found == {("services.py", "trainer.grpo.run"), ("services.py", "trainer.examples.learning.prepare")}


def test_the_checker_catches_a_face_module_importing_torch_inside_a_function(tmp_path):
    write(tmp_path, "trainer/spec/config.py", "from trainer.verifiers import verifier_names\n")
    write(tmp_path, "trainer/contracts.py", "import json\n")
    assert face_violations(tmp_path / "trainer") == []
    write(tmp_path, "trainer/spec/lora.py", "def peft_config():\n    from peft import LoraConfig\n")
    write(tmp_path, "trainer/verifiers/judge.py", "from trainer.rollout import TransformersBackend\n")
    found = {found.module for found in face_violations(tmp_path / "trainer")}
    assert found == {"peft.LoraConfig", "trainer.rollout.TransformersBackend"}


def test_the_checker_catches_services_importing_the_runner(tmp_path):
    write(tmp_path, "flywheel/training/tasks.py", "from flywheel.training import runner\n")
    write(tmp_path, "flywheel/training/runner.py", "from flywheel.training import services\n")
    write(tmp_path, "flywheel/training/services.py", "def reap():\n    from flywheel.training.tasks import run_job\n")
    assert job_path_violations(tmp_path / "flywheel") == set()
    write(tmp_path, "flywheel/training/services.py", "def run():\n    from flywheel.training.runner import run\n")
    assert job_path_violations(tmp_path / "flywheel") == {("services", "runner")}


def test_the_checker_catches_ingest_importing_triage(tmp_path):
    write(tmp_path, "flywheel/ingest/services.py", "from flywheel.core.models import Agent\n")
    assert ingest_violations(tmp_path / "flywheel") == []
    write(tmp_path, "flywheel/ingest/services.py", "from flywheel.triage.services import suggestions_run\n")
    found = [found.module for found in ingest_violations(tmp_path / "flywheel")]
    assert found == ["flywheel.triage.services.suggestions_run"]
