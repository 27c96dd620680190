"""An OpenAI-compatible chat server for a base model plus an optional LoRA adapter (transformers, CPU or GPU).

The fallback where vLLM is absent: `python -m trainer serve --base-model M [--adapter DIR]`.
- `POST /v1/chat/completions`: `messages` and `tools` in OpenAI's form; the prompt is rendered
  by `trainer.prompts` (the same rendering evaluation and training use), and an answer that
  parses as tool calls (`trainer.parsing`) comes back as `choices[0].message.tool_calls` in
  OpenAI's form with `finish_reason: "tool_calls"`. `temperature` defaults to 0 (greedy).
  Streaming and `n > 1` are refused with a 400.
- `GET /v1/models`, `GET /health`: the served name, base model and adapter sha256.
- `POST /admin/adapter` (`Authorization: Bearer <admin token>`, from `--admin-token-file` or
  `$FLYWHEEL_SERVE_ADMIN_TOKEN`; without one the endpoint is off): switch to another adapter
  without a restart. The base model stays loaded; the new adapter is verified against its
  manifest (`trainer.adapters.load_adapter`), merged into a copy of the base, and swapped in
  only once ready, so requests never see a half-loaded model and a refused adapter leaves the
  current one serving. A restart would cost a full model load and drop requests meanwhile.
Each response's `system_fingerprint` names the adapter (`adapter-<sha256 prefix>`, or `base`).

The server trusts its network: it binds to 127.0.0.1 by default and the web app, which checks
the callers' tokens, forwards to it. Batching across requests is vLLM's job, not this one's.
"""

from __future__ import annotations

import argparse
import copy
import hmac
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainer.adapters import load_adapter
from trainer.contracts import ContractError, Task, openai_tool
from trainer.models import load_model
from trainer.parsing import parse_tool_calls
from trainer.prompts import render_prompt
from trainer.rollout import GenerationBackend, TransformersBackend
from trainer.spec.adapters import verify_adapter
from trainer.spec.config import JobError
from trainer.spec.eval import SamplingConfig

ADMIN_TOKEN_ENV = "FLYWHEEL_SERVE_ADMIN_TOKEN"
MAX_BODY_BYTES = 8 << 20
DEFAULT_MAX_NEW_TOKENS = 256


class RequestError(Exception):
    """A request the server refuses; the status and message go back as OpenAI's error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclass(frozen=True)
class ServedModel:
    """What answers right now: a backend, its tokenizer, and which adapter it carries."""

    name: str
    base_model: str
    backend: GenerationBackend
    tokenizer: Any
    adapter: str | None = None
    adapter_sha256: str | None = None

    @property
    def fingerprint(self) -> str:
        return f"adapter-{self.adapter_sha256[:16]}" if self.adapter_sha256 else "base"

    def describe(self) -> dict[str, Any]:
        return {"model": self.name, "base_model": self.base_model, "adapter": self.adapter,
                "adapter_sha256": self.adapter_sha256, "system_fingerprint": self.fingerprint}  # fmt: skip


class ModelLoader:
    """Loads the base model once and builds served models from it, one per adapter."""

    def __init__(self, base_model: str, device: str = "auto") -> None:
        self.base_model = base_model
        self.loaded = load_model(base_model, device)

    def build(self, adapter: str | None, name: str) -> ServedModel:
        model, sha256 = self.loaded.model, None
        if adapter is not None:
            sha256 = verify_adapter(adapter).sha256
            # Merged into a copy: the pristine base stays for the next switch, and the merged
            # model runs as fast as the base does.
            model = load_adapter(copy.deepcopy(self.loaded.model), adapter).merge_and_unload()
            model.eval()
        backend = TransformersBackend(model, self.loaded.tokenizer, self.loaded.device)
        return ServedModel(name=name, base_model=self.base_model, backend=backend, tokenizer=self.loaded.tokenizer,
                           adapter=adapter, adapter_sha256=sha256)  # fmt: skip


Builder = Callable[[str | None, str], ServedModel]


class ChatService:
    """The server's behaviour without HTTP: completions, listings, and the adapter switch."""

    def __init__(self, model: ServedModel, *, builder: Builder | None = None, admin_token: str | None = None,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> None:  # fmt: skip
        self.model = model
        self.builder = builder
        self.admin_token = admin_token
        self.max_new_tokens = max_new_tokens
        self._generate_lock = threading.Lock()
        self._switch_lock = threading.Lock()

    def models(self) -> dict[str, Any]:
        current = self.model
        return {"object": "list", "data": [{"id": current.name, "object": "model", "created": 0,
                                            "owned_by": "agent-flywheel", **current.describe()}]}  # fmt: skip

    def health(self) -> dict[str, Any]:
        return {"status": "ok", **self.model.describe()}

    def complete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        request = parse_chat_request(body, self.max_new_tokens)
        current = self.model  # one model per request, even if a switch lands meanwhile
        prompt = render_chat(request, current.tokenizer)
        with self._generate_lock:
            generation = current.backend.generate([prompt], request.sampling)[0][0]
        return chat_response(generation.text, current, request,
                             prompt_tokens=generation.prompt_tokens, completion_tokens=generation.completion_tokens,
                             finished=generation.finished)  # fmt: skip

    def switch(self, body: Mapping[str, Any], authorization: str) -> dict[str, Any]:
        self._authorize(authorization)
        if self.builder is None:
            raise RequestError(HTTPStatus.NOT_IMPLEMENTED, "this server cannot switch adapters")
        adapter, name = body.get("adapter"), body.get("name") or self.model.name
        if adapter is not None and not isinstance(adapter, str):
            raise RequestError(HTTPStatus.BAD_REQUEST, "'adapter' must be a folder path or null")
        if not isinstance(name, str):
            raise RequestError(HTTPStatus.BAD_REQUEST, "'name' must be a string")
        with self._switch_lock:
            self.model = self._build_checked(adapter, name, body.get("sha256"))
        return self.health()

    def _build_checked(self, adapter: str | None, name: str, expected: Any) -> ServedModel:
        assert self.builder is not None
        try:
            built = self.builder(adapter, name)
        except JobError as error:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"adapter refused: {error}", "adapter_invalid") from None
        if expected is not None and built.adapter_sha256 != expected:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"adapter refused: its sha256 is {built.adapter_sha256}, "
                               f"not the expected {expected}", "adapter_invalid")  # fmt: skip
        return built

    def _authorize(self, authorization: str) -> None:
        if not self.admin_token:
            raise RequestError(HTTPStatus.NOT_FOUND, "the admin endpoint is off: no admin token configured")
        scheme, _, secret = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(secret.strip(), self.admin_token):
            raise RequestError(HTTPStatus.UNAUTHORIZED, "a valid admin token is required", "authentication_error")


# --- Requests and responses -----------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    sampling: SamplingConfig
    model: str | None


def parse_chat_request(body: Mapping[str, Any], max_new_tokens: int) -> ChatRequest:
    """The request's messages, tools and sampling, or a RequestError naming the bad field."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError(HTTPStatus.BAD_REQUEST, "'messages' must be a non-empty list of message objects")
    if body.get("stream"):
        raise RequestError(HTTPStatus.BAD_REQUEST, "streaming is not supported by this server; send stream=false")
    if body.get("n", 1) != 1:
        raise RequestError(HTTPStatus.BAD_REQUEST, "only n=1 is supported")
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise RequestError(HTTPStatus.BAD_REQUEST, "'tools' must be a list")
    if body.get("tool_choice") == "none":
        tools = []
    try:
        offered = [openai_tool(tool) for tool in tools]
    except (ContractError, AttributeError, TypeError) as error:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"'tools': {error}") from None
    return ChatRequest(messages=messages, tools=offered, sampling=_sampling(body, max_new_tokens),
                       model=body.get("model") if isinstance(body.get("model"), str) else None)


def _sampling(body: Mapping[str, Any], max_new_tokens: int) -> SamplingConfig:
    limit = body.get("max_completion_tokens", body.get("max_tokens")) or max_new_tokens
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    seed = body.get("seed")
    try:
        return SamplingConfig(max_new_tokens=min(int(limit), max_new_tokens),
                              temperature=float(0.0 if temperature is None else temperature),
                              top_p=float(1.0 if top_p is None else top_p), num_samples=1, batch_size=1,
                              seed=int(seed or 0))  # fmt: skip
    except (TypeError, ValueError) as error:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"bad sampling settings: {error}") from None


def render_chat(request: ChatRequest, tokenizer: Any) -> str:
    """The prompt for the conversation, rendered exactly as evaluation and training render tasks."""
    try:
        task = Task(id="chat", messages=request.messages, tools=request.tools, expected_calls=[],
                    no_call_expected=True)  # fmt: skip
        return render_prompt(task, tokenizer)
    except (ContractError, KeyError, TypeError, ValueError) as error:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"the conversation cannot be rendered: {error}") from None


def openai_tool_calls(text: str) -> list[dict[str, Any]]:
    """The calls in `text` in OpenAI's form (arguments as a JSON string); empty when there are none."""
    parsed = parse_tool_calls(text)
    if not parsed.ok:
        return []
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
            for call in parsed.calls]  # fmt: skip


def chat_response(text: str, model: ServedModel, request: ChatRequest, *, prompt_tokens: int,
                  completion_tokens: int, finished: bool) -> dict[str, Any]:  # fmt: skip
    """An OpenAI chat.completion object for one generated answer."""
    calls = openai_tool_calls(text) if request.tools else []
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else text}
    if calls:
        message["tool_calls"] = calls
    finish_reason = "tool_calls" if calls else ("stop" if finished else "length")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model.name,
        "system_fingerprint": model.fingerprint,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "flywheel": {"base_model": model.base_model, "adapter_sha256": model.adapter_sha256},
    }


# --- HTTP -----------------------------------------------------------------------------------


def make_handler(service: ChatService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "flywheel-serve"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            routes = {"/health": service.health, "/v1/models": service.models}
            route = routes.get(self.path.split("?", 1)[0].rstrip("/"))
            if route is None:
                self._send(HTTPStatus.NOT_FOUND, _error(f"no such path: {self.path}", "not_found"))
            else:
                self._send(HTTPStatus.OK, route())

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/")
            try:
                body = self._body()
                if path == "/v1/chat/completions":
                    self._send(HTTPStatus.OK, service.complete(body))
                elif path == "/admin/adapter":
                    self._send(HTTPStatus.OK, service.switch(body, self.headers.get("Authorization", "")))
                else:
                    self._send(HTTPStatus.NOT_FOUND, _error(f"no such path: {self.path}", "not_found"))
            except RequestError as error:
                self._send(error.status, _error(str(error), error.kind))

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is over {MAX_BODY_BYTES} bytes")
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except (ValueError, UnicodeDecodeError):
                raise RequestError(HTTPStatus.BAD_REQUEST, "the body is not valid JSON") from None
            if not isinstance(body, dict):
                raise RequestError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
            return body

        def _send(self, status: int, payload: Mapping[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            sys.stderr.write(f"serve: {self.address_string()} {format % args}\n")

    return Handler


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def make_server(service: ChatService, host: str, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), make_handler(service))
    server.daemon_threads = True
    return server


def admin_token(path: str | None) -> str | None:
    if path:
        return Path(path).read_text(encoding="utf-8").strip() or None
    return os.environ.get(ADMIN_TOKEN_ENV) or None


def watch_parent(server: ThreadingHTTPServer, every_s: float = 1.0) -> None:
    """Shut the server down once its parent process is gone (it is then re-parented).

    Not PR_SET_PDEATHSIG: that fires when the parent *thread* ends, and a web server starts
    this process from a request thread that ends soon after.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        server.shutdown()

    threading.Thread(target=watch, daemon=True).start()


def serve_forever(args: argparse.Namespace) -> int:
    """Load the model, listen, print one `listening` JSON line on stdout, and serve until SIGTERM."""
    name = getattr(args, "model_name", None) or args.base_model
    try:
        loader = ModelLoader(args.base_model, getattr(args, "device", "auto"))
        service = ChatService(loader.build(args.adapter, name), builder=loader.build,
                              admin_token=admin_token(getattr(args, "admin_token_file", None)),
                              max_new_tokens=getattr(args, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS))  # fmt: skip
    except (JobError, OSError) as error:
        print(f"serve: {error}", file=sys.stderr)
        return 1
    server = make_server(service, args.host, args.port)
    # SIGTERM stops the loop from another thread: shutdown() waits for serve_forever to return.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: threading.Thread(target=server.shutdown).start())
    if getattr(args, "exit_with_parent", False):
        watch_parent(server)
    host, port = server.server_address[:2]
    print(json.dumps({"event": "listening", "host": host, "port": port, **service.model.describe()}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
