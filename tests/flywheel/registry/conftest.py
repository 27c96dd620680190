"""Registry fixtures: an agent, tiny LoRA adapters, registered versions, finished jobs, snapshots."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from flywheel.core.services import agent_create
from flywheel.datasets.importers import read
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.registry import services, serving, views
from flywheel.registry.models import ModelVersion
from flywheel.training import services as training_services
from flywheel.training.models import Job, JobState
from tests.conftest import REPO_ROOT

TINY_MODEL = REPO_ROOT / "tests" / "fixtures" / "tiny-model"
TINY_TASKS = REPO_ROOT / "trainer" / "examples" / "tiny_tasks.jsonl"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def make_adapter(folder: Path, seed: int) -> Path:
    """A LoRA adapter on the tiny model with large, seeded weights: each seed answers differently."""
    import torch
    from peft import LoraConfig, get_peft_model

    from trainer.adapters import save_adapter
    from trainer.models import load_model

    model = get_peft_model(load_model(str(TINY_MODEL), device="cpu").model,
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))  # fmt: skip
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    save_adapter(model, folder, base_model=str(TINY_MODEL), snapshot_sha256="tiny")
    return folder


@pytest.fixture(scope="session")
def adapters(tmp_path_factory) -> list[Path]:
    """Three tiny adapters, made once per session (a few seconds each)."""
    root = tmp_path_factory.mktemp("adapters")
    return [make_adapter(root / f"adapter-{seed}", seed) for seed in (1, 2, 3)]


@pytest.fixture(autouse=True)
def registry_dir(settings, tmp_path) -> Path:
    """Each test its own registry storage (the database rolls back; files would not)."""
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    return tmp_path / "registry"


@pytest.fixture
def agent(db):
    return agent_create(actor=None, name="support-bot", description="the test agent")


@pytest.fixture
def register(agent, adapters) -> Callable[..., ModelVersion]:
    def make(index: int = 0, **fields) -> ModelVersion:
        return services.version_register(actor=None, agent=fields.pop("agent", agent), adapter_dir=adapters[index],
                                         base_model=str(TINY_MODEL), **fields)  # fmt: skip

    return make


@pytest.fixture
def heldout_snapshot(agent):
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="heldout", agent=agent, source_ref="tiny")
    return snapshot_create(actor=None, name="tiny held-out", split="heldout", agent=agent)


def finish_job(*, kind: str, snapshot, agent=None, result: dict | None = None, adapter: str = "",
               exit_code: int = 0, **fields) -> Job:  # fmt: skip
    """A job that ran (state running, its done event stored) and is closed by the training app's job_finish."""
    job = Job.objects.create(kind=kind, state=JobState.RUNNING, snapshot=snapshot, agent=agent,
                             base_model=str(TINY_MODEL), adapter=adapter, attempts=1,
                             result=result if result is not None else {}, **fields)  # fmt: skip
    return training_services.job_finish(job=job, exit_code=exit_code, stderr_tail="", cancelled=False)


def done(files: dict[str, str], metrics: dict | None = None) -> dict:
    return {"event": "done", "metrics": metrics or {}, "results": None, "files": files}


def write_gate_file(folder: Path, decision: dict, report: dict | None = None) -> dict[str, str]:
    """A gate job's gate.json, as trainer.gate writes it; the files of its done event."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gate.json"
    path.write_text(json.dumps({"decision": decision, **(report or {})}))
    return {"gate": str(path), "candidate_results": str(folder / "candidate.jsonl"),
            "baseline_results": str(folder / "baseline.jsonl")}


QUESTION = [{"role": "user", "content": "Say hello to the customer."}]


@pytest.fixture
def managed_server(settings):
    """The app's own `trainer serve` on the CPU, stopped after the test."""
    settings.SERVE_URL = ""
    settings.SERVE_DEVICE = "cpu"
    settings.SERVE_MAX_NEW_TOKENS = 8
    yield serving.MANAGED
    serving.MANAGED.stop()


class AnswersInFlight:
    """Whole chat answers the endpoint has made and not yet closed: their recording runs once the body has gone
    out (`views._RecordedAfterwards`), after the client already has it."""

    def __init__(self) -> None:
        self.open = 0
        self.changed = threading.Condition()

    def settle(self, timeout: float = 10) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.open == 0, timeout), "an answer's recording did not finish"


@pytest.fixture
def answers_in_flight(monkeypatch) -> AnswersInFlight:
    counter = AnswersInFlight()
    made, close = views._RecordedAfterwards.__init__, views._RecordedAfterwards.close

    def counted_init(self, *args, **kwargs) -> None:
        with counter.changed:
            counter.open += 1
        made(self, *args, **kwargs)

    def counted_close(self) -> None:
        try:
            close(self)
        finally:
            with counter.changed:
                counter.open -= 1
                counter.changed.notify_all()

    monkeypatch.setattr(views._RecordedAfterwards, "__init__", counted_init)
    monkeypatch.setattr(views._RecordedAfterwards, "close", counted_close)
    return counter


def settling(chat: openai.OpenAI, answers: AnswersInFlight) -> openai.OpenAI:
    """`chat`, whose whole answers return once the app has also recorded them (streams: see `settled`)."""
    create = chat.chat.completions.create

    def create_and_settle(*args, **kwargs):
        answer = create(*args, **kwargs)
        if not kwargs.get("stream"):
            answers.settle()
        return answer

    chat.chat.completions.create = create_and_settle  # type: ignore[method-assign]
    return chat
