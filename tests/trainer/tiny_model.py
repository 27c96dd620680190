"""The tiny test model (tests/fixtures/tiny-model) and helpers the runtime tests share.

Importing this module turns the Hugging Face hub off for the session: nothing in these
tests may download. `tiny_model()` loads a fresh copy each call (PEFT edits a model in
place, so tests that add adapters must not share one).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from trainer.contracts import Task  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
TINY_MODEL = FIXTURES / "tiny-model"
TINY_GGUF = FIXTURES / "tiny-model.gguf"
TINY_TASKS = REPO_ROOT / "trainer" / "examples" / "tiny_tasks.jsonl"
TINY_SPEC = REPO_ROOT / "trainer" / "examples" / "tiny_eval.json"
EXTERNAL = REPO_ROOT.parent / "shared" / "external"


def tiny_model() -> Any:
    from trainer.models import load_model

    return load_model(str(TINY_MODEL), device="cpu")


def tiny_tasks() -> list[Task]:
    return [Task.from_json(json.loads(line)) for line in TINY_TASKS.read_text().splitlines() if line.strip()]


def write_spec(path: Path, **fields: Any) -> Path:
    """A copy of the tiny example spec with absolute paths and `fields` overridden, written to `path`."""
    spec = json.loads(TINY_SPEC.read_text())
    spec.update(base_model=str(TINY_MODEL), task_paths=[str(TINY_TASKS)], output_dir=str(path.parent / "out"))
    hyperparameters = {**spec["hyperparameters"], **fields.pop("hyperparameters", {})}
    spec.update(fields, hyperparameters=hyperparameters)
    path.write_text(json.dumps(spec))
    return path
