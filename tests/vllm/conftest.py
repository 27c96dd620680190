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


QUESTION = [{"role": "user", "content": "Say hello to the customer."}]


@pytest.fixture(scope="session")
def tool_calling_model(tmp_path_factory) -> tuple[Path, Path, list[dict], str]:
    """The small model taught to answer QUESTION, offered the tiny tasks' first tools, with a call to the first.

    Its folder, an adapter that changes nothing (LoRA B at zero: a registered version needs one),
    the tools and the called tool's name. Taught on the trainer's rendering of the request.
    """
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.trainer.tiny_model import tiny_tasks
    from trainer.contracts import Task
    from trainer.models import load_tokenizer
    from trainer.prompts import render_prompt

    folder = tmp_path_factory.mktemp("tool-calling-model")
    model_dir, adapter_dir = folder / "model", folder / "adapter"
    tokenizer = load_tokenizer(str(TINY_MODEL))
    tools = tiny_tasks()[0].tools
    name = tools[0]["function"]["name"]
    prompt = render_prompt(Task(id="hello", messages=QUESTION, tools=tools, expected_calls=[], no_call_expected=True),
                           tokenizer)  # fmt: skip
    answer = f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call><|im_end|>'
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    config = LlamaConfig.from_pretrained(TINY_MODEL)
    config.update({"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
                   "intermediate_size": 256, "initializer_range": 0.2})  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    ids = torch.tensor([prompt_ids + answer_ids])
    labels = torch.tensor([[-100] * len(prompt_ids) + answer_ids])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(200):
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.01:
            break
    model.save_pretrained(model_dir)
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(TINY_MODEL / file, model_dir / file)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    save_adapter(get_peft_model(model, lora), adapter_dir, base_model=str(model_dir))
    return model_dir, adapter_dir, tools, name
