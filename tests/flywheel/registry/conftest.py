"""Registry fixtures: an agent, tiny LoRA adapters, registered versions, finished jobs, snapshots, and for the
chat endpoint's tests a stub served model (`UpstreamHandler`, `serve_upstream`), the live version, the
recording task's caught messages (`sent`) and an `openai` client (`chat`)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

from flywheel.core.roles import Role
from flywheel.core.services import agent_create, api_token_create
from flywheel.datasets.importers import read
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.registry import services, serving, tasks, views
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


# --- a stub of the served model, and the chat endpoint in front of it ---------------------------


class UpstreamHandler(BaseHTTPRequestHandler):
    """The base of a test's stub served model (vLLM's OpenAI server): `reply` sends parts as they are written."""

    def reply(self, status: int, content_type: str, parts: list[bytes]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(sum(len(part) for part in parts)))
        self.end_headers()
        for part in parts:
            self.wfile.write(part)
            self.wfile.flush()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def serve_upstream(settings) -> Iterator[Callable[[type[UpstreamHandler]], str]]:
    """serve_upstream(Handler) starts the stub and points the app's SERVE_URL at it; stopped after the test."""
    servers: list[ThreadingHTTPServer] = []

    def start(handler: type[UpstreamHandler]) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        settings.SERVE_URL, settings.SERVE_ADMIN_TOKEN = f"http://127.0.0.1:{server.server_port}", ""
        return settings.SERVE_URL

    yield start
    for server in servers:
        server.shutdown()


@pytest.fixture
def live(register, make_user) -> ModelVersion:
    """The agent's first version, promoted: the one the chat endpoint serves."""
    version = register(0)
    services.version_promote(actor=make_user(Role.APPROVER), version=version, reason="first ship")
    return version


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """The recording task's messages (exchange ids), caught where they are handed to the broker."""
    messages: list[str] = []
    monkeypatch.setattr(tasks.record_served, "delay", messages.append)
    return messages


@pytest.fixture
def chat(live_server, make_user, answers_in_flight) -> openai.OpenAI:
    """The `openai` client of a viewer's product, against the app's /v1 (whole answers return recorded)."""
    token = api_token_create(user=make_user(Role.VIEWER), name="support-bot")[1]
    client = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=30)
    return settling(client, answers_in_flight)


def settled(check: Callable[[], bool], timeout: float = 10) -> bool:
    """Whether `check` holds within `timeout`: a stream is recorded after its last chunk has gone out."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
