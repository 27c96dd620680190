"""Benchmark: chat completions from 8 concurrent clients, vLLM's OpenAI server against `python -m trainer serve`.

Run from the repository root after `make vllm`:
    .venv/bin/python bench/chat_concurrency.py [--model demo] [--adapter DIR] [--requests 32] [--clients 8]
        [--max-tokens 32] [--device cpu|cuda] [--bfcl FILE]

Both servers serve the same base model (and adapter, when given) on 127.0.0.1, one after the
other; vLLM with the trainer's chat template and the hermes tool parser, as the app starts it.
The same requests (BFCL prompts with their tools, greedy) go to each from `--clients` threads
with the real `openai` client. Prints requests per second and the latency p50 / p95 of each,
and the ratios vLLM / trainer serve. Server start-up is not timed. Asserts nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
VLLM_PYTHON = Path(os.environ.get("VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))
BFCL = REPO_ROOT.parent / "shared" / "external" / "bfcl"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server at {url} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"the server at {url} did not start in {seconds:g} s")


def vllm_server(model: str, adapter: str | None, port: int, folder: Path,
                device: str) -> tuple[subprocess.Popen, str]:  # vLLM picks its device itself
    template = folder / "chat_template.jinja"
    template.write_text(subprocess.check_output([sys.executable, "-m", "trainer", "chat-template"], text=True))
    path = subprocess.check_output([sys.executable, "-m", "trainer", "models", "path", model], text=True).strip()
    command = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name",
               "base", "--host", "127.0.0.1", "--port", str(port), "--chat-template", str(template),
               "--chat-template-content-format", "string", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    if adapter:
        command += ["--enable-lora", "--max-lora-rank", "64", "--lora-modules", f"adapter={adapter}"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    log = (folder / "vllm.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), "adapter" if adapter else "base"


def trainer_server(model: str, adapter: str | None, port: int, folder: Path,
                   device: str) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "trainer", "serve", "--base-model", model, "--port", str(port),
               "--device", device, "--model-name", "served"]
    if adapter:
        command += ["--adapter", adapter]
    log = (folder / "trainer.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), "served"


def measure(url: str, name: str, requests: list[dict], clients: int, max_tokens: int,
            api_key: str = "none") -> dict[str, float]:
    import openai

    chat = openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=900)

    def ask(request: dict) -> float:
        started = time.perf_counter()
        chat.chat.completions.create(model=name, max_tokens=max_tokens, temperature=0, **request)
        return time.perf_counter() - started

    ask(requests[0])  # warm-up
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        latencies = sorted(pool.map(ask, requests))
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 1), "requests_per_s": round(len(requests) / seconds, 3),
            "p50_s": round(latencies[len(latencies) // 2], 2),
            "p95_s": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 2)}  # fmt: skip


def ratios(vllm: object, trainer: object) -> dict[str, float]:
    """vLLM's figures over trainer serve's: throughput and p95 latency."""
    assert isinstance(vllm, dict) and isinstance(trainer, dict)
    return {"ratio_requests_per_s": round(vllm["requests_per_s"] / trainer["requests_per_s"], 2),
            "ratio_p95": round(vllm["p95_s"] / trainer["p95_s"], 2)}  # fmt: skip


def main() -> int:
    from trainer.spec.bfcl import load_bfcl_tasks
    from trainer.spec.tasks import seeded_sample

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--adapter")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--device", default="cpu", help="trainer serve's device (vLLM picks its own)")
    parser.add_argument("--bfcl", type=Path, default=BFCL / "BFCL_v4_simple_python.json", help="BFCL questions")
    args = parser.parse_args()
    tasks = seeded_sample(load_bfcl_tasks(args.bfcl), args.requests, 0)
    requests = [{"messages": task.messages, "tools": task.tools} for task in tasks]
    report: dict[str, object] = {"model": args.model, "adapter": args.adapter, "requests": len(requests),
                                 "clients": args.clients, "max_tokens": args.max_tokens}  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        for label, start in (("vllm", vllm_server), ("trainer_serve", trainer_server)):
            port = free_port()
            process, name = start(args.model, args.adapter, port, Path(folder), args.device)
            try:
                wait_healthy(f"http://127.0.0.1:{port}", process)
                report[label] = measure(f"http://127.0.0.1:{port}", name, requests, args.clients, args.max_tokens)
            finally:
                process.terminate()
                process.wait(timeout=60)
            print(f"{label}: {report[label]}")
    print(json.dumps({**report, **ratios(report["vllm"], report["trainer_serve"])}))
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
