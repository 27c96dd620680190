"""vLLM's OpenAI server with the trainer's chat template: a chat request becomes the trained prompt, to the token."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.trainer.tiny_model import EXTERNAL, tiny_tasks
from tests.vllm.conftest import REPO_ROOT, VLLM_ENV, VLLM_PYTHON
from trainer.contracts import Task
from trainer.models import load_tokenizer
from trainer.prompts import render_prompt, served_chat_template
from trainer.spec.bfcl import load_bfcl_tasks

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
BFCL = EXTERNAL / "bfcl"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server(vllm_model, tmp_path_factory) -> Iterator[str]:
    """vLLM's OpenAI server on the small model with the trainer's chat template; its base URL."""
    model_dir, _ = vllm_model
    template = tmp_path_factory.mktemp("template") / "chat_template.jinja"
    template.write_text(served_chat_template())
    port = free_port()
    log = (template.parent / "server.log").open("w")
    process = subprocess.Popen(
        [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
         "--served-model-name", "small", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
         "--chat-template", str(template), "--chat-template-content-format", "string"],
        cwd=REPO_ROOT, env={**os.environ, **VLLM_ENV}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url, server_log = f"http://127.0.0.1:{port}", template.parent / "server.log"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5):
                    break
            except OSError as error:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"vLLM's server did not start: {server_log.read_text()[-3000:]}") from error
                time.sleep(1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()


def tau_bench_conversations() -> list[Task]:
    """Real airline conversations up to their last user turn: tool calls and results as the history."""
    records = json.loads((EXTERNAL / "tau_bench" / "gpt-4o-airline.json").read_text())[:20]
    tools = next(task for task in tiny_tasks() if task.tools).tools
    tasks = []
    for record in records:
        last_user = max(index for index, message in enumerate(record["traj"]) if message["role"] == "user")
        tasks.append(Task(id=f"tau-{record['task_id']}", messages=record["traj"][: last_user + 1], tools=tools,
                          expected_calls=[], no_call_expected=True))  # fmt: skip
    return tasks


def tokenized_by_server(url: str, task: Task) -> list[int]:
    body = {"model": "small", "messages": copy.deepcopy(task.messages), "tools": task.tools,
            "add_generation_prompt": True, "add_special_tokens": False}  # fmt: skip
    request = urllib.request.Request(f"{url}/tokenize", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=60) as response:
        return list(json.loads(response.read())["tokens"])


def test_a_chat_request_becomes_the_prompt_the_trainer_trains_on_token_for_token(server, vllm_model):
    tokenizer = load_tokenizer(str(vllm_model[0]))
    bfcl = load_bfcl_tasks(BFCL / "BFCL_v4_multiple.json")[:20] + load_bfcl_tasks(BFCL / "BFCL_v4_parallel.json")[:10]
    tasks = [*tiny_tasks(), *bfcl, *tau_bench_conversations()]
    assert sum(1 for task in tasks if any(message.get("tool_calls") for message in task.messages)) >= 15
    differing = [task.id for task in tasks if tokenized_by_server(server, task)
                 != tokenizer(render_prompt(task, tokenizer), add_special_tokens=False)["input_ids"]]  # fmt: skip
    assert differing == []
