"""Forward chat completions to a server that answers with an agent's live version.

Two ways to serve (settings, "Registry and serving"):
- `SERVE_URL` names a server the operator runs. vLLM started with `--enable-lora --lora-modules
  NAME=PATH` for the versions is asked for the live one by its LoRA module name
  (`ModelVersion.serve_name`); a `python -m trainer serve` with `SERVE_ADMIN_TOKEN` is switched
  to the live adapter through its `POST /admin/adapter` when the live version changes.
- Otherwise this process starts its own server (one per web process: the demo's case; with
  several web workers run one server and set SERVE_URL), (re)started at most once per
  SERVE_RESTART_MIN_SECONDS, whatever the requests ask. `SERVE_ENGINE=trainer`: a `python -m
  trainer serve`, switched to the live adapter. `SERVE_ENGINE=vllm`: vLLM's OpenAI server
  (`ManagedVllm`) with the trainer's chat template and tool parser; each version's adapter is
  loaded at runtime under its tag and every request names its version's tag, so a promote or a
  rollback loads the new adapter before any request names it and no request is ever answered by
  an adapter half switched.
Before each request the live version is read from the database and compared with what the
server reports, so a promote or rollback made through any web process takes effect on the next
request. The adapter is verified against the registered hashes when it is handed to a server (a
start or a switch), not on every request: hashing the weights costs more than a short answer.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import queue
import secrets
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from flywheel.registry import selectors, storage
from flywheel.registry.models import ModelVersion


class ServingUnavailable(Exception):
    """No server answers for the live version; the message says why, `retry_after` (s) when to ask again."""

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Target:
    """What the server must serve: the live version's base model and adapter, with its registered hashes."""

    tag: str
    base_model: str
    adapter: str
    sha256: str
    config_sha256: str
    lora_module: str

    def verified_adapter(self) -> str:
        """The adapter folder, once its files match the registered hashes (else AdapterTampered)."""
        return str(storage.verify_files(Path(self.adapter), sha256=self.sha256, config_sha256=self.config_sha256))


def target_for(version: ModelVersion) -> Target:
    return Target(tag=version.tag, base_model=version.base_model,
                  adapter=str(selectors.adapter_location(version=version)), sha256=version.adapter_sha256,
                  config_sha256=version.config_sha256, lora_module=version.serve_name)  # fmt: skip


def http_json(method: str, url: str, body: dict[str, Any] | None = None, *, token: str = "",
              timeout: float = 30) -> tuple[int, dict[str, Any]]:  # fmt: skip
    """One JSON request; the status and the decoded body (an error body too)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own server
            return response.status, _json_or_text(response.read())
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"{}")
        except ValueError:
            return error.code, {"error": {"message": f"server answered {error.code}", "type": "upstream_error"}}
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        raise ServingUnavailable(f"the serving process at {url} did not answer: {error}") from None


def _json_or_text(raw: bytes) -> dict[str, Any]:
    # vLLM answers its adapter endpoints in plain text.
    try:
        return dict(json.loads(raw or b"{}"))
    except ValueError:
        return {"text": raw.decode(errors="replace")}


class _ChildServer:
    """A serving process this web process starts for a base model, restarted at most once per interval."""

    what = "serving process"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self.url = ""
        self.base_model = ""
        self._next_start = 0.0  # time.monotonic() before which no new start is tried

    def ensure(self, target: Target) -> str:
        """The URL of a server that serves `target`, starting the process or handing it the adapter as needed."""
        with self._lock:
            if self._process is None or self._process.poll() is not None or self.base_model != target.base_model:
                self._restart(target)
            self._serve(target)
            return self.url

    def stop(self) -> None:
        with self._lock:
            self._stop()
            self._next_start = 0.0

    def _restart(self, target: Target) -> None:
        """Start the child for `target`, at most once per SERVE_RESTART_MIN_SECONDS.

        A server that fails to start or dies, or requests that alternate between base models, so
        cost one model load per interval, not one per request; meanwhile callers are told when to retry.
        """
        wait = math.ceil(self._next_start - time.monotonic())
        if wait > 0:
            interval = settings.SERVE_RESTART_MIN_SECONDS
            message = f"no new {self.what} for {target.tag} within {interval} s of the last; retry in {wait} s"
            raise ServingUnavailable(message, retry_after=wait)
        self._next_start = time.monotonic() + settings.SERVE_RESTART_MIN_SECONDS
        self._stop()
        self._process = self._start(target)
        self.base_model = target.base_model

    def _start(self, target: Target) -> subprocess.Popen[str]:
        """Start the process for `target`'s base model and set `url`; ServingUnavailable when it does not come up."""
        raise NotImplementedError

    def _serve(self, target: Target) -> None:
        """Make the running process answer with `target`'s adapter."""
        raise NotImplementedError

    def _forget(self) -> None:
        """Drop what the stopped process served."""

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.url, self.base_model = "", ""
        self._forget()


class ManagedServer(_ChildServer):
    """A `python -m trainer serve` child process that this web process starts and switches."""

    def __init__(self) -> None:
        super().__init__()
        self._token = secrets.token_urlsafe(32)
        self.sha256 = ""

    def _start(self, target: Target) -> subprocess.Popen[str]:
        command = [*settings.SERVE_COMMAND, "--base-model", target.base_model, "--adapter", target.verified_adapter(),
                   "--model-name", target.tag, "--host", "127.0.0.1", "--port", "0",
                   "--device", settings.SERVE_DEVICE, "--max-new-tokens", str(settings.SERVE_MAX_NEW_TOKENS),
                   "--exit-with-parent"]  # fmt: skip
        env = {**os.environ, "FLYWHEEL_SERVE_ADMIN_TOKEN": self._token}
        log = _log_file()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                   text=True, start_new_session=True)  # fmt: skip
        log.close()
        listening = _first_line(process, settings.SERVE_STARTUP_SECONDS)
        if listening.get("event") != "listening":
            process.kill()
            process.wait()
            raise ServingUnavailable(f"`python -m trainer serve` did not start for {target.tag}; see {log.name}")
        self.sha256 = target.sha256  # started with the target's adapter
        self.url = f"http://127.0.0.1:{listening['port']}"
        return process

    def _serve(self, target: Target) -> None:
        if self.sha256 == target.sha256:
            return
        status, answer = http_json("POST", f"{self.url}/admin/adapter",
                                   {"adapter": target.verified_adapter(), "name": target.tag, "sha256": target.sha256},
                                   token=self._token, timeout=settings.SERVE_STARTUP_SECONDS)  # fmt: skip
        if status != 200:
            raise ServingUnavailable(f"the serving process refused {target.tag}: {_message(answer)}")
        self.sha256 = target.sha256

    def _forget(self) -> None:
        self.sha256 = ""


def _log_file() -> IO[str]:
    folder = Path(settings.VAR_DIR) / "serve"
    folder.mkdir(parents=True, exist_ok=True)
    return (folder / f"serve-{os.getpid()}.log").open("a")


def _first_line(process: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The child's first stdout line as JSON (its `listening` line), or {} after `timeout`."""
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        lines.put(stdout.readline())
        # Keep draining: a child blocked on a full stdout pipe would stop answering.
        for _ in stdout:
            pass

    threading.Thread(target=read, daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
        return dict(json.loads(line)) if line.strip() else {}
    except (queue.Empty, ValueError):
        return {}


def _message(answer: dict[str, Any]) -> str:
    error = answer.get("error")
    return str(error.get("message") if isinstance(error, dict) else error)


class ManagedVllm(_ChildServer):
    """vLLM's OpenAI server, started by this web process for one base model, each version's adapter loaded by tag.

    The adapter a request gets is the one its `model` names, so switching is loading: the new
    version's adapter, once its files match the registered hashes, is loaded before any request
    names it. The previous one stays loaded for requests still in flight; older ones are unloaded.
    """

    what = "vLLM server"
    KEEP_LOADED = 2

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []  # version tags, oldest first

    def _start(self, target: Target) -> subprocess.Popen[str]:
        folder = Path(settings.VAR_DIR) / "serve"
        folder.mkdir(parents=True, exist_ok=True)
        template = folder / "chat_template.jinja"
        template.write_text(_trainer_output("chat-template"), encoding="utf-8")
        port, model = _free_port(), _trainer_output("models", "path", target.base_model).strip()
        command = [*settings.VLLM_SERVE_COMMAND, "--model", model, "--served-model-name", target.base_model,
                   "--host", "127.0.0.1", "--port", str(port),
                   "--enable-lora", "--max-lora-rank", "64", "--max-loras", str(self.KEEP_LOADED),
                   "--chat-template", str(template), "--chat-template-content-format", "string",
                   "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]  # fmt: skip
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
        log = _log_file()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   text=True, start_new_session=True)  # fmt: skip
        log.close()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + settings.SERVE_STARTUP_SECONDS
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise ServingUnavailable(f"vLLM's server did not start for {target.tag}; see {log.name}")
            time.sleep(1)
        self.url = url
        return process

    def _serve(self, target: Target) -> None:
        if target.tag in self.loaded:
            return
        status, answer = http_json("POST", f"{self.url}/v1/load_lora_adapter",
                                   {"lora_name": target.tag, "lora_path": target.verified_adapter()},
                                   timeout=settings.SERVE_STARTUP_SECONDS)  # fmt: skip
        if status != 200:
            raise ServingUnavailable(f"vLLM refused the adapter of {target.tag}: {_message(answer) or answer}")
        self.loaded.append(target.tag)
        while len(self.loaded) > self.KEEP_LOADED:
            http_json("POST", f"{self.url}/v1/unload_lora_adapter", {"lora_name": self.loaded.pop(0)})

    def _forget(self) -> None:
        self.loaded = []


def _trainer_output(*arguments: str) -> str:
    """What `python -m trainer ARGUMENTS` prints: the app asks the trainer, which it may not import."""
    done = subprocess.run([*settings.TRAINER_COMMAND, *arguments], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise ServingUnavailable(f"`trainer {' '.join(arguments)}` failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:  # noqa: S310 - our own server
            return bool(response.status == 200)
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return False


MANAGED = ManagedServer()
MANAGED_VLLM = ManagedVllm()
atexit.register(MANAGED.stop)
atexit.register(MANAGED_VLLM.stop)


def external_url(target: Target) -> str:
    """SERVE_URL, after switching it to the target where it is a trainer server with an admin token."""
    url = settings.SERVE_URL
    if settings.SERVE_ADMIN_TOKEN:
        _, health = http_json("GET", f"{url}/health")
        if health.get("adapter_sha256") != target.sha256:
            status, answer = http_json("POST", f"{url}/admin/adapter",
                                       {"adapter": target.verified_adapter(), "name": target.tag,
                                        "sha256": target.sha256},
                                       token=settings.SERVE_ADMIN_TOKEN, timeout=settings.SERVE_STARTUP_SECONDS)
            if status != 200:
                raise ServingUnavailable(f"the server at {url} refused {target.tag}: {_message(answer)}")
    return url


def _upstream(target: Target, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The server that answers for `target`, started or switched as needed, and the request to send it."""
    if settings.SERVE_URL:
        # vLLM picks the adapter by model name; a trainer server has one model and ignores it.
        return external_url(target), {**body, "model": target.lora_module}
    if settings.SERVE_ENGINE == "vllm":
        return MANAGED_VLLM.ensure(target), {**body, "model": target.tag}  # the adapter loaded under the tag
    return MANAGED.ensure(target), {**body, "model": target.tag}


class UpstreamRefused(Exception):
    """The serving process answered a streamed request with an error: its status and body."""

    def __init__(self, status: int, answer: dict[str, Any]) -> None:
        super().__init__(_message(answer))
        self.status, self.answer = status, answer


def chat_stream(*, version: ModelVersion, body: dict[str, Any]) -> Iterator[bytes]:
    """A streamed chat request for `version`: the server's server-sent events, each chunk's `model` the version tag.

    The request is sent before this returns, so a server that refuses it (a `python -m trainer
    serve` does not stream) raises UpstreamRefused here, while the caller can still answer in JSON.
    """
    target = target_for(version)
    url, upstream = _upstream(target, body)
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(upstream).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        response = urllib.request.urlopen(request, timeout=settings.SERVE_REQUEST_SECONDS)  # noqa: S310 - our server
    except urllib.error.HTTPError as error:
        raise UpstreamRefused(error.code, _json_or_text(error.read())) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        raise ServingUnavailable(f"the serving process at {url} did not answer: {error}") from None
    return _relabelled(response, target.tag)


def _relabelled(response: Any, tag: str) -> Iterator[bytes]:
    with response:
        for line in response:
            if line.startswith(b"data: {"):
                chunk = json.loads(line[len(b"data: "):])
                chunk["model"] = tag  # what the agent tags its trajectories with, as for a whole answer
                line = b"data: " + json.dumps(chunk).encode() + b"\n"
            yield line


def chat_forward(*, version: ModelVersion, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Send the chat request to a server for `version`; its status and answer, the version tag as `model`."""
    target = target_for(version)
    url, upstream = _upstream(target, body)
    started = time.monotonic()
    status, answer = http_json("POST", f"{url}/v1/chat/completions", upstream, timeout=settings.SERVE_REQUEST_SECONDS)
    served = (answer.get("flywheel") or {}).get("adapter_sha256", target.sha256) if status == 200 else None
    if status == 200 and served != target.sha256:
        # Another request switched the server between our check and our call: never mislabel an answer.
        return 503, {"error": {"message": "the live version changed during the request; send it again",
                               "type": "live_version_changed"}}
    if status == 200:
        # The tag is what the agent should report with its trajectories, so they link to this version.
        answer["model"] = target.tag
        answer["flywheel"] = {**(answer.get("flywheel") or {}), "version": target.tag, "adapter_sha256": target.sha256,
                              "forward_s": round(time.monotonic() - started, 3)}  # fmt: skip
    return status, answer
