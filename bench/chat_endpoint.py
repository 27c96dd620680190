"""Benchmark: the app's chat endpoint under 8 concurrent clients, serving through vLLM against `trainer serve`.

Run from the repository root after `make vllm`:
    .venv/bin/python bench/chat_endpoint.py [--model demo] [--adapter DIR] [--requests 32] [--clients 8]
        [--max-tokens 32] [--bfcl FILE]

For each engine (`SERVE_ENGINE=vllm`, then `SERVE_ENGINE=trainer`) a fresh app on SQLite in a
temporary folder: an agent, a version of the model with the adapter (a fresh rank-16 LoRA on the
model, when none is given) promoted live, an API token, and gunicorn with one worker of 8 threads,
so one serving child answers the whole app as in the demo. The same requests as
bench/chat_concurrency.py (BFCL prompts with their tools, greedy) go to `/v1/chat/completions`
from `--clients` threads with the real `openai` client, after one warm-up request that waits for the
serving child to start (not timed). Prints requests per second and the latency p50 / p95 of each,
and the ratios vLLM / trainer serve. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import openai

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.chat_concurrency import BFCL, free_port, measure, ratios  # noqa: E402

AGENT = "bench-bot"

SETUP = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from flywheel.core.roles import Role
from flywheel.core.services import agent_create, all_agents_grant, api_token_create, roles_sync
from flywheel.registry.services import version_promote, version_register
roles_sync()
user = get_user_model().objects.create_user(username="bench", password=None)
user.groups.add(Group.objects.get(name=Role.APPROVER.value))
all_agents_grant(user=user)
version = version_register(actor=None, agent=agent_create(actor=None, name={agent!r}), adapter_dir={adapter!r},
                           base_model={model!r})
version_promote(actor=user, version=version, reason="benchmark")
print(api_token_create(user=user, name="bench")[1])
"""


def fresh_adapter(model: str, folder: Path) -> str:
    """A rank-16 LoRA on every linear layer of `model`, B at zero: the served cost of an adapter, the base's answers."""
    from peft import LoraConfig, get_peft_model

    from trainer.adapters import save_adapter
    from trainer.models import load_model, resolve_model

    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    save_adapter(get_peft_model(load_model(model, "cpu").model, lora), folder, base_model=resolve_model(model))
    return str(folder)


def app_env(folder: Path, engine: str) -> dict[str, str]:
    return {**os.environ, "FLYWHEEL_VAR_DIR": str(folder / "var"), "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
            "SERVE_ENGINE": engine, "SERVE_URL": "", "DJANGO_SETTINGS_MODULE": "flywheel.settings",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}  # fmt: skip


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=REPO_ROOT, env=env, check=True, text=True,
                          capture_output=True).stdout  # fmt: skip


def first_answer(chat: openai.OpenAI, request: dict, seconds: float = 900) -> None:
    """Ask until the app answers: its serving child starts on the first request and is refused until up."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            chat.chat.completions.create(model=AGENT, max_tokens=4, temperature=0, **request)
            return
        except openai.APIStatusError as error:
            if error.status_code != 503 or time.monotonic() > deadline:
                raise
            time.sleep(2)


def measure_engine(engine: str, model: str, adapter: str, requests: list[dict], args: argparse.Namespace,
                   folder: Path) -> dict[str, float]:  # fmt: skip
    env = app_env(folder, engine)
    manage(env, "migrate", "--no-input")
    token = manage(env, "shell", "-c", SETUP.format(agent=AGENT, adapter=adapter, model=model)).strip().splitlines()[-1]
    port = free_port()
    log = (folder / "gunicorn.log").open("w")
    app = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "flywheel.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1",
         "--threads", str(args.clients), "--timeout", "900"],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        chat = openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=900)
        deadline = time.monotonic() + 60
        while True:  # gunicorn takes a moment to bind
            try:
                first_answer(chat, requests[0])
                break
            except openai.APIConnectionError:
                if app.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(1)
        return measure(url, AGENT, requests, args.clients, args.max_tokens, api_key=token)
    finally:
        app.terminate()
        app.wait(timeout=120)
        log.close()


def main() -> int:
    from trainer.models import resolve_model
    from trainer.spec.bfcl import load_bfcl_tasks
    from trainer.spec.tasks import seeded_sample

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--adapter", help="the version's adapter; a fresh rank-16 LoRA when not given")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--bfcl", type=Path, default=BFCL / "BFCL_v4_simple_python.json", help="BFCL questions")
    args = parser.parse_args()
    tasks = seeded_sample(load_bfcl_tasks(args.bfcl), args.requests, 0)
    requests = [{"messages": task.messages, "tools": task.tools} for task in tasks]
    model = resolve_model(args.model)
    report: dict[str, object] = {"model": model, "requests": len(requests), "clients": args.clients,
                                 "max_tokens": args.max_tokens}  # fmt: skip
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        adapter = args.adapter or fresh_adapter(args.model, folder / "adapter")
        report["adapter"] = args.adapter or "fresh rank-16 LoRA (B at zero)"
        for engine in ("vllm", "trainer"):
            (folder / engine).mkdir()
            report[engine] = measure_engine(engine, model, adapter, requests, args, folder / engine)
            print(f"app with SERVE_ENGINE={engine}: {report[engine]}")
    print(json.dumps({**report, **ratios(report["vllm"], report["trainer"])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
