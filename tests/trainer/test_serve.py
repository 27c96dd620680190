"""The OpenAI-compatible server, called with the real `openai` client: tool calls, the tiny model, adapter switches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.trainer.tiny_model import REPO_ROOT, TINY_MODEL, tiny_model
from trainer.adapters import save_adapter
from trainer.rollout import Generation
from trainer.serve import ChatService, ModelLoader, ServedModel, make_server
from trainer.spec.adapters import WEIGHTS_FILE

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


class ScriptedBackend:
    """Answers every prompt with the same text and remembers the prompts."""

    name = "scripted"

    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[str] = []

    def generate(self, prompts, sampling, hooks=None):
        self.prompts.extend(prompts)
        return [[Generation(self.text, prompt_tokens=7, completion_tokens=5, finished=True, latency_s=0.01)]
                for _ in prompts]


@pytest.fixture(scope="module")
def tokenizer():
    from trainer.models import load_tokenizer

    return load_tokenizer(str(TINY_MODEL))


def serving(service: ChatService):
    server = make_server(service, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def serve():
    servers = []

    def start(service: ChatService) -> str:
        server, url = serving(service)
        servers.append(server)
        return url

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def scripted(tokenizer, text: str) -> tuple[ChatService, ScriptedBackend]:
    backend = ScriptedBackend(text)
    return ChatService(ServedModel("support-bot:v1", "tiny", backend, tokenizer)), backend


def test_an_answer_that_parses_as_a_call_comes_back_as_openai_tool_calls(serve, tokenizer):
    service, backend = scripted(tokenizer, '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
                                           "</tool_call>")
    completion = client(serve(service)).chat.completions.create(
        model="support-bot", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"} and call.id.startswith("call_")
    assert completion.model == "support-bot:v1" and completion.usage.total_tokens == 12
    # The prompt was rendered by trainer.prompts: the tool's schema and the user's words are in it.
    assert "get_weather" in backend.prompts[0] and "Weather in Paris?" in backend.prompts[0]


def test_a_conversation_with_earlier_calls_and_results_renders_and_answers_in_text(serve, tokenizer):
    service, backend = scripted(tokenizer, "It is sunny in Paris.")
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
    ]
    completion = client(serve(service)).chat.completions.create(model="x", messages=messages, tools=[WEATHER_TOOL])
    assert completion.choices[0].message.content == "It is sunny in Paris."
    assert completion.choices[0].message.tool_calls is None and completion.choices[0].finish_reason == "stop"
    assert '"sky": "sunny"' in backend.prompts[0]


def test_streaming_and_several_choices_are_refused_as_bad_requests(serve, tokenizer):
    chat = client(serve(scripted(tokenizer, "hi")[0])).chat.completions
    with pytest.raises(openai.BadRequestError, match="streaming"):
        chat.create(model="x", messages=[{"role": "user", "content": "hi"}], stream=True)
    with pytest.raises(openai.BadRequestError, match="n=1"):
        chat.create(model="x", messages=[{"role": "user", "content": "hi"}], n=2)
    with pytest.raises(openai.BadRequestError, match="messages"):
        chat.create(model="x", messages=[])


def test_models_and_health_name_what_is_served(serve, tokenizer):
    url = serve(scripted(tokenizer, "hi")[0])
    assert [model.id for model in client(url).models.list().data] == ["support-bot:v1"]
    health = json.loads(urllib.request.urlopen(f"{url}/health").read())
    assert health["status"] == "ok" and health["system_fingerprint"] == "base" and health["adapter_sha256"] is None


def test_the_admin_endpoint_is_off_without_a_token(serve, tokenizer):
    url = serve(scripted(tokenizer, "hi")[0])
    assert post(f"{url}/admin/adapter", {"adapter": None}, "Bearer anything")[0] == 404


def post(url: str, body: dict, authorization: str = "") -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": authorization})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def strong_adapter(folder: Path, seed: int) -> Path:
    """A LoRA adapter on the tiny model with large weights, so that it visibly changes the answers."""
    import torch
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model().model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    save_adapter(model, folder, base_model=str(TINY_MODEL))
    return folder


def ask(url: str) -> openai.types.chat.ChatCompletion:
    return client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Say hello."}],
                                               max_tokens=8)


@pytest.mark.slow
def test_the_tiny_model_answers_and_switches_adapter_without_a_restart(serve, tmp_path):
    loader = ModelLoader(str(TINY_MODEL), "cpu")
    service = ChatService(loader.build(None, "tiny"), builder=loader.build, admin_token="s3cret")
    url = serve(service)
    base = ask(url)
    assert base.system_fingerprint == "base" and base.choices[0].message.content

    adapter = strong_adapter(tmp_path / "adapter", seed=1)
    assert post(f"{url}/admin/adapter", {"adapter": str(adapter)}, "Bearer wrong")[0] == 401
    status, health = post(f"{url}/admin/adapter", {"adapter": str(adapter), "name": "tiny:v2"}, "Bearer s3cret")
    assert status == 200 and health["model"] == "tiny:v2"
    adapted = ask(url)
    sha = json.loads((adapter / "manifest.json").read_text())["sha256"]
    assert adapted.system_fingerprint == f"adapter-{sha[:16]}" and adapted.model == "tiny:v2"
    assert adapted.choices[0].message.content != base.choices[0].message.content

    # A tampered adapter is refused and the verified one keeps answering.
    tampered = strong_adapter(tmp_path / "tampered", seed=2)
    (tampered / WEIGHTS_FILE).write_bytes((tampered / WEIGHTS_FILE).read_bytes() + b"x")
    status, error = post(f"{url}/admin/adapter", {"adapter": str(tampered)}, "Bearer s3cret")
    assert status == 400 and error["error"]["type"] == "adapter_invalid" and "sha256" in error["error"]["message"]
    assert ask(url).choices[0].message.content == adapted.choices[0].message.content

    # Back to the base model: the pristine weights answer exactly as before.
    assert post(f"{url}/admin/adapter", {"adapter": None, "name": "tiny"}, "Bearer s3cret")[0] == 200
    assert ask(url).choices[0].message.content == base.choices[0].message.content


@pytest.mark.slow
def test_python_m_trainer_serve_listens_answers_and_stops_on_sigterm(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer", "serve", "--base-model", str(TINY_MODEL), "--port", "0",
         "--model-name", "tiny:v0", "--device", "cpu"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        listening = json.loads(process.stdout.readline() or "{}")
        assert listening.get("event") == "listening", process.stderr.read()[-2000:]
        url = f"http://127.0.0.1:{listening['port']}"
        assert ask(url).model == "tiny:v0"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
