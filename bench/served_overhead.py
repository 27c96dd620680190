"""Benchmark: the latency that recording and guardrails add to the app's chat endpoint, against both off, in one run.

Run from the repository root:
    .venv/bin/python bench/served_overhead.py [--requests 200] [--upstream stub|tiny|both] [--pause-ms 25]
        [--database-url URL] [--broker-url URL]

One app (gunicorn, one worker of 2 threads) on a fresh database (a SQLite file in a temporary
folder and Celery's filesystem transport, the demo's embedded defaults, unless --database-url
and --broker-url name a fresh PostgreSQL database and a Redis), with four agents whose live
versions are the same adapter on tests' tiny model, answered by the same upstream:
- `guarded`: every served answer recorded (sample rate 1: the outbox row and the broker message
  on the request's path) and guardrails on (trainer's default safety policy, one rule blocking,
  the rest flagging);
- `bare`: recording off and guardrails off, the reference;
- `guardrails` and `recording`: one of the two on, to tell what each costs.
Upstreams: `stub`, a server in this process that answers at once with one tool call (so the
guardrails judge a call on every request and nothing but the app's own work is timed), whole and
streamed; `tiny`, `python -m trainer serve` with the tiny model and the adapter answering up to 8
new tokens, on the CPU (whole only: it does not stream; its text answers have no calls to judge,
so only the recording and the policy's read are added there).

Each round asks every agent once, in an order shuffled round by round, from one `openai` client
(one kept-alive connection, as the package keeps them) after 20 warm-up rounds, so drift in the
machine's load falls on all arms alike; each request is followed by an untimed pause (--pause-ms,
25), as an agent runs its tool between two calls. The pause matters: the app records an answer
once it has gone out, on the thread that served it, so with no pause (--pause-ms 0) the next
request, whichever arm it is for, waits for or competes with that work, and the recording shows
as load on every arm rather than as latency on its own. Prints each arm's p50 and p95 in
milliseconds and, for all but `bare`, the ratios to `bare` at p50 and p95 and the median of the
paired differences (the arm's request less bare's in the same round).
No Celery worker runs: storing the records is a worker's work, off the request's path. Asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.chat_concurrency import free_port, wait_healthy  # noqa: E402
from bench.chat_endpoint import fresh_adapter, manage  # noqa: E402

TINY_MODEL = REPO_ROOT / "tests" / "fixtures" / "tiny-model"
WARM_UP = 20
QUESTION = [{"role": "system", "content": "You are the support bot."},
            {"role": "user", "content": "Where is order 17?"}]  # fmt: skip
ORDER = {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}
FIND_ORDER = {"name": "find_order", "description": "Find an order by its number.", "parameters": ORDER}
TOOLS = [{"type": "function", "function": FIND_ORDER}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "find_order", "arguments": '{"order": 17}'}}

SETUP = """
import os
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from flywheel.core.roles import Role
from flywheel.core.services import (agent_create, agent_served_recording_set, all_agents_grant, api_token_create,
                                    roles_sync)
from flywheel.registry.services import version_promote, version_register
from flywheel.triage.services import agent_policy_set
from trainer.verifiers.safety import SafetyPolicy
roles_sync()
user = get_user_model().objects.create_user(username="bench", password=None)
user.groups.add(Group.objects.get(name=Role.APPROVER.value))
all_agents_grant(user=user)
for name, records, guards in (("bare", False, False), ("guardrails", False, True), ("recording", True, False),
                              ("guarded", True, True)):
    agent = agent_create(actor=None, name=name)
    agent_served_recording_set(actor=None, agent=agent, enabled=records, sample_rate=1.0)
    rails = {"default": "flag", "rules": {"sql-drop": "block"}} if guards else {"default": "off"}
    agent_policy_set(actor=user, agent=agent, policy=SafetyPolicy.default().to_json(), guardrails=rails)
    version = version_register(actor=None, agent=agent, adapter_dir=os.environ["BENCH_ADAPTER"],
                               base_model=os.environ["BENCH_MODEL"])
    version_promote(actor=user, version=version, reason="benchmark")
print(api_token_create(user=user, name="bench")[1])
"""


def _sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def stub_stream() -> bytes:
    """A tool call streamed as vLLM streams one: its id and name, its arguments in two pieces, the finish, usage."""
    envelope = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
    deltas = [{"role": "assistant", "content": ""},
              {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "find_order", "arguments": ""}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '{"order"'}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": ": 17}"}}]}]  # fmt: skip
    chunks = [{**envelope, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    chunks.append({**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chunks.append({**envelope, "choices": [], "usage": {"prompt_tokens": 60, "completion_tokens": 12}})
    return b"".join(_sse(chunk) for chunk in chunks) + b"data: [DONE]\n\n"


STUB_ANSWER = json.dumps({
    "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub",
    "choices": [{"index": 0, "finish_reason": "tool_calls",
                 "message": {"role": "assistant", "content": None, "tool_calls": [CALL]}}],
    "usage": {"prompt_tokens": 60, "completion_tokens": 12, "total_tokens": 72},
}).encode()  # fmt: skip
STUB_STREAM = stub_stream()


class Stub(BaseHTTPRequestHandler):
    """Answers every chat completion at once with the same tool call, whole or streamed."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data, kind = (STUB_STREAM, "text/event-stream") if body.get("stream") else (STUB_ANSWER, "application/json")
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def stub_upstream() -> tuple[str, Callable[[], None]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}", server.shutdown


def tiny_upstream(adapter: str, folder: Path) -> tuple[str, Callable[[], None]]:
    port = free_port()
    log = (folder / "trainer-serve.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "trainer", "serve", "--base-model", str(TINY_MODEL),
                                "--adapter", adapter, "--port", str(port), "--device", "cpu",
                                "--max-new-tokens", "8"], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, process)

    def stop() -> None:
        process.terminate()
        process.wait(timeout=60)
        log.close()

    return url, stop


def app_env(folder: Path, upstream: str, args: argparse.Namespace) -> dict[str, str]:
    env = {**os.environ, "FLYWHEEL_VAR_DIR": str(folder / "var"), "SERVE_URL": upstream, "SERVE_ADMIN_TOKEN": "",
           "DJANGO_SETTINGS_MODULE": "flywheel.settings", "API_RATE_LIMIT_CHAT": "1000000",
           "DATABASE_URL": args.database_url or f"sqlite:///{folder / 'db.sqlite3'}"}  # fmt: skip
    env.pop("CELERY_BROKER_URL", None)
    if args.broker_url:
        env["CELERY_BROKER_URL"] = args.broker_url
    return env


def gunicorn(env: dict[str, str], folder: Path) -> tuple[str, subprocess.Popen]:
    port = free_port()
    log = (folder / "gunicorn.log").open("w")
    app = subprocess.Popen([sys.executable, "-m", "gunicorn", "flywheel.wsgi", "--bind", f"127.0.0.1:{port}",
                            "--workers", "1", "--threads", "2", "--timeout", "300"],
                           cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    return f"http://127.0.0.1:{port}", app


def asker(chat: openai.OpenAI, stream: bool) -> Callable[[str], float]:
    """A function that asks one agent once and returns the seconds until the whole answer has arrived."""

    def ask(agent: str) -> float:
        started = time.perf_counter()
        if stream:
            chunks = list(chat.chat.completions.create(model=agent, messages=QUESTION, tools=TOOLS, max_tokens=8,
                                                       temperature=0, stream=True))  # fmt: skip
            assert chunks
        else:
            answer = chat.chat.completions.create(model=agent, messages=QUESTION, tools=TOOLS, max_tokens=8,
                                                  temperature=0)  # fmt: skip
            assert answer.choices
        return time.perf_counter() - started

    return ask


ARMS = ("bare", "guardrails", "recording", "guarded")


def rounds(requests: int) -> Iterator[list[str]]:
    """One request to each arm per round, in an order shuffled each round (seeded): no arm always follows another."""
    shuffler = random.Random(0)
    for _ in range(requests):
        yield shuffler.sample(ARMS, len(ARMS))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(ask: Callable[[str], float], requests: int, pause_s: float) -> dict[str, Any]:
    """Each arm's p50 and p95; for each arm but bare, its ratio to bare and its median paired difference."""
    for _ in range(WARM_UP):
        for agent in ARMS:
            ask(agent)
    times: dict[str, list[float]] = {agent: [] for agent in ARMS}
    for order in rounds(requests):
        for agent in order:
            times[agent].append(ask(agent))
            time.sleep(pause_s)
    report: dict[str, Any] = {}
    bare_p50, bare_p95 = percentile(times["bare"], 0.5), percentile(times["bare"], 0.95)
    for agent, values in times.items():
        p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
        report[agent] = {"p50_ms": round(1000 * p50, 2), "p95_ms": round(1000 * p95, 2)}
        if agent != "bare":
            paired = [mine - bare for mine, bare in zip(values, times["bare"], strict=True)]
            report[agent] |= {"ratio_p50": round(p50 / bare_p50, 3), "ratio_p95": round(p95 / bare_p95, 3),
                              "added_ms_median_paired": round(1000 * statistics.median(paired), 2)}  # fmt: skip
    return report


def run_upstream(kind: str, adapter: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    upstream, stop_upstream = stub_upstream() if kind == "stub" else tiny_upstream(adapter, folder)
    env = app_env(folder, upstream, args)
    try:
        manage(env, "migrate", "--no-input")
        setup_env = {**env, "BENCH_ADAPTER": adapter, "BENCH_MODEL": str(TINY_MODEL)}
        token = manage(setup_env, "shell", "-c", SETUP).strip().splitlines()[-1]
        url, app = gunicorn(env, folder)
        try:
            chat = openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=300)
            wait_for_app(chat)
            pause_s = args.pause_ms / 1000
            report = {"whole": measure(asker(chat, stream=False), args.requests, pause_s)}
            if kind == "stub":
                report["streamed"] = measure(asker(chat, stream=True), args.requests, pause_s)
            report["recorded"] = outbox_rows(env)
            return report
        finally:
            app.terminate()
            app.wait(timeout=60)
    finally:
        stop_upstream()


def wait_for_app(chat: openai.OpenAI, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            chat.chat.completions.create(model="bare", messages=QUESTION, max_tokens=8)
            return
        except openai.APIConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def outbox_rows(env: dict[str, str]) -> dict[str, int]:
    """How many answers each agent left for the recording task: those that record, every one; the others, none."""
    code = ("import json; from flywheel.registry.models import ServedExchange as S; "
            f"print(json.dumps({{n: S.objects.filter(agent__name=n).count() for n in {ARMS!r}}}))")  # fmt: skip
    return dict(json.loads(manage(env, "shell", "-c", code).strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="timed requests per arm (rounds)")
    parser.add_argument("--upstream", choices=("stub", "tiny", "both"), default="both")
    parser.add_argument("--database-url", help="a fresh database (migrated here); default: SQLite in a temp folder")
    parser.add_argument("--broker-url", help="Celery's broker; default: the filesystem transport in the temp folder")
    pause = "untimed pause after each request, as an agent runs its tool between calls"
    parser.add_argument("--pause-ms", type=float, default=25.0, help=pause)
    args = parser.parse_args()
    kinds = ("stub", "tiny") if args.upstream == "both" else (args.upstream,)
    if args.database_url and len(kinds) > 1:
        parser.error("with --database-url, name one --upstream (each run needs a fresh database)")
    database = "sqlite" if not args.database_url else args.database_url.split(":", 1)[0]
    report: dict[str, Any] = {"requests_per_arm": args.requests, "database": database, "pause_ms": args.pause_ms,
                              "broker": (args.broker_url or "filesystem://").split(":", 1)[0]}  # fmt: skip
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        adapter = fresh_adapter(str(TINY_MODEL), folder / "adapter")
        for kind in kinds:
            (folder / kind).mkdir()
            report[kind] = run_upstream(kind, adapter, folder / kind, args)
            print(f"{kind}: {json.dumps(report[kind])}", flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
