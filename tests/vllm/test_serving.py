"""vLLM's OpenAI server with the trainer's chat template: a chat request becomes the trained prompt, to the token."""

from __future__ import annotations

import concurrent.futures
import copy
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from flywheel.core.roles import Role
from flywheel.core.services import agent_create, api_token_create
from flywheel.registry import services as registry
from flywheel.registry import serving
from flywheel.registry.selectors import vllm_command
from tests.trainer.tiny_model import EXTERNAL, tiny_tasks
from tests.vllm.conftest import QUESTION, REPO_ROOT, VLLM_ENV, VLLM_PYTHON
from trainer.adapters import save_adapter
from trainer.contracts import Task
from trainer.models import load_model, load_tokenizer
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


# --- The app's chat endpoint on its own vLLM server ----------------------------------------------


@pytest.fixture
def vllm_serving(settings, tmp_path, monkeypatch):
    settings.SERVE_URL, settings.SERVE_ENGINE = "", "vllm"
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    for name, value in VLLM_ENV.items():
        monkeypatch.setenv(name, value)  # the server the app starts inherits this process's environment
    yield serving.MANAGED_VLLM
    serving.MANAGED_VLLM.stop()


def second_adapter(model_dir: Path, folder: Path) -> Path:
    """Another LoRA adapter on the small model: it answers otherwise than the first."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(7)
    model = get_peft_model(load_model(str(model_dir), "cpu").model, LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM"))
    save_adapter(model, folder, base_model=str(model_dir))
    return folder


@pytest.mark.django_db(transaction=True)
def test_the_chat_endpoint_serves_the_live_adapter_through_vllm_and_follows_promote_and_rollback(
    live_server, vllm_serving, vllm_model, make_user, tmp_path
):
    model_dir, adapter_dir = vllm_model
    agent = agent_create(actor=None, name="support-bot")
    first, second = (registry.version_register(actor=None, agent=agent, adapter_dir=folder, base_model=str(model_dir))
                     for folder in (adapter_dir, second_adapter(model_dir, tmp_path / "second")))  # fmt: skip
    approver = make_user(Role.APPROVER)
    registry.version_promote(actor=approver, version=first, reason="first ship")
    token = api_token_create(user=make_user(Role.REVIEWER), name="support-bot")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=300)

    def ask() -> tuple[str, str]:
        answer = chat.chat.completions.create(model="support-bot", messages=QUESTION, max_tokens=8, temperature=0)
        return answer.model, answer.choices[0].message.content or ""

    def ask_streaming() -> tuple[set[str], str]:
        chunks = list(chat.chat.completions.create(model="support-bot", messages=QUESTION, max_tokens=8,
                                                   temperature=0, stream=True))  # fmt: skip
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        return {chunk.model for chunk in chunks}, text

    from_first = ask()
    assert from_first[0] == "support-bot:v1" and from_first[1] and vllm_serving.loaded == ["support-bot:v1"]
    assert ask_streaming() == ({"support-bot:v1"}, from_first[1])  # streamed as it comes, the same answer

    def asked_across(change: Callable[[], object]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """Answers to 4 requests in flight while `change` runs, and to 4 asked after it returned."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            before = [pool.submit(ask) for _ in range(4)]
            change()
            after = [pool.submit(ask) for _ in range(4)]
            return [future.result() for future in before], [future.result() for future in after]

    # Each answer is its labelled version's own, whichever way the switch goes.
    during, after = asked_across(lambda: registry.version_promote(actor=approver, version=second, reason="second"))
    from_second = ask()
    assert from_second[0] == "support-bot:v2" and from_second[1] != from_first[1]
    assert set(during) <= {from_first, from_second} and set(after) == {from_second}
    assert vllm_serving.loaded == ["support-bot:v1", "support-bot:v2"]  # loaded at runtime: the server never restarted
    during, after = asked_across(lambda: registry.version_rollback(actor=approver, agent=agent, reason="v2 is worse"))
    assert set(during) <= {from_first, from_second} and set(after) == {from_first}  # greedy: v1's very answer


@pytest.mark.django_db
def test_the_vllm_command_a_version_page_shows_serves_the_version_as_printed(vllm_model, settings, tmp_path):
    model_dir, adapter_dir = vllm_model
    settings.REGISTRY_DIR = str(tmp_path / "registry")
    version = registry.version_register(actor=None, agent=agent_create(actor=None, name="support-bot"),
                                        adapter_dir=adapter_dir, base_model=str(model_dir))  # fmt: skip
    port = free_port()
    command = vllm_command(version=version) + f" --host 127.0.0.1 --port {port}"
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(["bash", "-c", command], cwd=REPO_ROOT, env={**os.environ, **VLLM_ENV}, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while not serving._healthy(url):
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-3000:]
            time.sleep(1)
        status, answer = serving.http_json("POST", f"{url}/v1/chat/completions", {
            "model": version.serve_name, "messages": QUESTION, "tools": tiny_tasks()[0].tools, "max_tokens": 8})
        assert status == 200, answer
        assert answer["model"] == version.serve_name and answer["choices"][0]["message"]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        log.close()


@pytest.mark.django_db(transaction=True)
def test_a_call_comes_back_through_the_app_as_openai_tool_calls_whole_and_streamed(
    live_server, vllm_serving, tool_calling_model, make_user
):
    model_dir, adapter_dir, tools, name = tool_calling_model
    agent = agent_create(actor=None, name="support-bot")
    version = registry.version_register(actor=None, agent=agent, adapter_dir=adapter_dir, base_model=str(model_dir))
    registry.version_promote(actor=make_user(Role.APPROVER), version=version, reason="first ship")
    token = api_token_create(user=make_user(Role.REVIEWER), name="support-bot")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=300)
    asked = {"model": "support-bot", "messages": QUESTION, "tools": tools, "max_tokens": 48, "temperature": 0}
    whole = chat.chat.completions.create(**asked)
    (call,) = whole.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (name, {})
    assert whole.choices[0].finish_reason == "tool_calls" and whole.model == "support-bot:v1"
    chunks = list(chat.chat.completions.create(**asked, stream=True))
    streamed = [delta for chunk in chunks if chunk.choices for delta in chunk.choices[0].delta.tool_calls or []]
    assert {delta.function.name for delta in streamed if delta.function and delta.function.name} == {name}
    assert "".join(delta.function.arguments or "" for delta in streamed if delta.function) == "{}"
