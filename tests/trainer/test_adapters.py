from __future__ import annotations

import json

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from tests.trainer.tiny_model import tiny_model
from trainer.adapters import load_adapter, merge_adapter, save_adapter
from trainer.spec.adapters import CONFIG_FILE, MANIFEST_FILE, WEIGHTS_FILE, AdapterError, file_sha256, verify_adapter

INPUT = torch.tensor([[1, 20, 30, 40, 2]])


def logits(model):
    with torch.no_grad():
        return model(input_ids=INPUT).logits


def trained_adapter():
    """A LoRA adapter on the tiny model whose weights are non-zero, as after training."""
    peft_model = get_peft_model(tiny_model().model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    return peft_model.eval()


@pytest.fixture
def saved(tmp_path):
    peft_model = trained_adapter()
    manifest = save_adapter(
        peft_model,
        tmp_path / "adapter",
        base_model="tiny",
        snapshot_sha256="abc123",
        config={"learning_rate": 1e-4},
        metrics={"valid_json_rate": 0.5},
    )
    return tmp_path / "adapter", manifest, logits(peft_model)


def test_an_adapter_is_saved_in_peft_format_with_a_manifest_of_its_hashes(saved):
    folder, manifest, _ = saved
    assert (folder / WEIGHTS_FILE).is_file() and (folder / CONFIG_FILE).is_file()
    on_disk = json.loads((folder / MANIFEST_FILE).read_text())
    assert on_disk["sha256"] == file_sha256(folder / WEIGHTS_FILE) == manifest.sha256
    assert on_disk["config_sha256"] == file_sha256(folder / CONFIG_FILE)
    assert (on_disk["base_model"], on_disk["snapshot_sha256"]) == ("tiny", "abc123")
    assert on_disk["config"] == {"learning_rate": 1e-4} and on_disk["metrics"] == {"valid_json_rate": 0.5}


def test_a_verified_adapter_loads_and_reproduces_the_saved_model(saved):
    folder, manifest, expected = saved
    assert verify_adapter(folder) == manifest
    base = tiny_model().model
    before = logits(base)
    adapted = load_adapter(base, folder)
    assert torch.allclose(logits(adapted), expected, atol=1e-6)
    assert not torch.allclose(before, expected, atol=1e-3)


def test_changed_weights_fail_the_hash_check(saved):
    folder, _, _ = saved
    data = bytearray((folder / WEIGHTS_FILE).read_bytes())
    data[-1] ^= 0xFF
    (folder / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(AdapterError, match=f"{WEIGHTS_FILE} has sha256 .* the manifest says") as caught:
        load_adapter(tiny_model().model, folder)
    assert caught.value.kind == "adapter_invalid"


def test_a_changed_adapter_config_fails_the_hash_check(saved):
    folder, _, _ = saved
    config = json.loads((folder / CONFIG_FILE).read_text())
    config["lora_alpha"] = 64
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(AdapterError, match=CONFIG_FILE):
        verify_adapter(folder)


def test_a_missing_folder_or_manifest_is_an_adapter_error(saved, tmp_path):
    with pytest.raises(AdapterError, match="adapter folder not found"):
        verify_adapter(tmp_path / "absent")
    folder, _, _ = saved
    (folder / MANIFEST_FILE).unlink()
    with pytest.raises(AdapterError, match=f"no {MANIFEST_FILE}"):
        verify_adapter(folder)


def test_a_merged_export_behaves_like_base_plus_adapter(saved, tmp_path):
    folder, _, expected = saved
    loaded = tiny_model()
    output = merge_adapter(loaded.model, loaded.tokenizer, folder, tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(output).eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert torch.allclose(logits(merged), expected, atol=1e-4)
    assert (output / "tokenizer.json").is_file()
