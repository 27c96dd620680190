"""What the vLLM tests share: .venv-vllm's Python and a small model vLLM's CPU build can run, with an adapter."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.trainer.tiny_model import TINY_MODEL
from trainer.adapters import save_adapter

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = Path(os.environ.get("VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))
# One GiB of KV cache is plenty for these prompts; vLLM's CPU default takes four.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
MAX_NEW_TOKENS = 24
END_OF_TURN = 2  # <|im_end|> in the tiny model's tokenizer


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory) -> tuple[Path, Path]:
    """A Llama vLLM's CPU attention takes (heads of 64), with the tiny model's tokenizer, and a LoRA adapter on it."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("vllm-model")
    model_dir, adapter_dir = folder / "model", folder / "adapter"
    config = LlamaConfig.from_pretrained(TINY_MODEL)
    # Wide initial weights spread the logits, so no greedy choice hangs on a float rounding.
    config.update({"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
                   "intermediate_size": 256, "initializer_range": 0.2})  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # the end-of-turn token trades places with token 48, which the model writes mid-answer
        embeddings = model.model.embed_tokens.weight  # tied: the output layer follows
        embeddings[[END_OF_TURN, 48]] = embeddings[[48, END_OF_TURN]]
    model.save_pretrained(model_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(TINY_MODEL / name, model_dir / name)
    torch.manual_seed(1)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                      task_type="CAUSAL_LM")  # fmt: skip
    save_adapter(get_peft_model(model, lora), adapter_dir, base_model=str(model_dir))
    return model_dir, adapter_dir


