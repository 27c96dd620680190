"""The vllm backend on vLLM's CPU build (`.venv-vllm`, `make vllm`) answers as the transformers backend does.

A small Llama built from a config (the tiny test model's head size of 8 is one vLLM's CPU
attention refuses; this one has heads of 64) and a LoRA adapter with random weights on it. The
same rendered prompts go through the transformers backend here and through the vllm backend in
.venv-vllm's Python: greedy answers must be the same text from the same number of tokens, base
and through the adapter, while the adapter changes what the model says.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.trainer.tiny_model import tiny_tasks
from tests.vllm.conftest import MAX_NEW_TOKENS, REPO_ROOT, VLLM_ENV, VLLM_PYTHON
from trainer.models import load_model
from trainer.prompts import render_prompt
from trainer.rollout import TransformersBackend
from trainer.spec.eval import SamplingConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def transformers_answers(model_dir: Path, adapter_dir: Path | None, prompts: list[str]) -> list[dict]:
    from peft import PeftModel

    loaded = load_model(str(model_dir), "cpu")
    model = PeftModel.from_pretrained(loaded.model, str(adapter_dir)) if adapter_dir else loaded.model
    backend = TransformersBackend(model, loaded.tokenizer, "cpu")
    generations = backend.generate(prompts, SamplingConfig(max_new_tokens=MAX_NEW_TOKENS, batch_size=4))
    return [samples[0].__dict__ for samples in generations]


def vllm_answers(model_dir: Path, adapter_dir: Path, prompts: list[str], folder: Path) -> dict:
    assert VLLM_PYTHON.exists(), f"{VLLM_PYTHON} is missing: `make vllm` builds it (the README's test command does)"
    request, result = folder / "request.json", folder / "result.json"
    request.write_text(json.dumps({"model": str(model_dir), "adapter": str(adapter_dir), "prompts": prompts,
                                   "max_new_tokens": MAX_NEW_TOKENS}))  # fmt: skip
    env = {**os.environ, **VLLM_ENV}
    done = subprocess.run([str(VLLM_PYTHON), str(Path(__file__).parent / "generate.py"), str(request), str(result)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(result.read_text())


def same_answer(answer: dict) -> tuple:
    return answer["text"], answer["prompt_tokens"], answer["completion_tokens"], answer["finished"]


def test_greedy_answers_are_the_transformers_backends_base_and_through_an_adapter(vllm_model, tmp_path):
    model_dir, adapter_dir = vllm_model
    tokenizer = load_model(str(model_dir), "cpu").tokenizer
    prompts = [render_prompt(task, tokenizer) for task in tiny_tasks()]
    served = vllm_answers(model_dir, adapter_dir, prompts, tmp_path)
    base = transformers_answers(model_dir, None, prompts)
    adapted = transformers_answers(model_dir, adapter_dir, prompts)
    assert [same_answer(a) for a in served["base"]["generations"]] == [same_answer(a) for a in base]
    assert [same_answer(a) for a in served["adapter"]["generations"]] == [same_answer(a) for a in adapted]
    assert [a["text"] for a in adapted] != [a["text"] for a in base]  # the adapter is applied, not ignored
    # Some answers end at the end-of-turn token mid-way and some run out of tokens: both ways of ending agree.
    assert {(a["finished"], a["completion_tokens"] < MAX_NEW_TOKENS) for a in base} == {(True, True), (False, False)}
    # Each answer is timed by its own request in the engine, not by the whole call.
    latencies = [answer["latency_s"] for answer in served["base"]["generations"]]
    assert len(set(latencies)) > 1 and all(0 < latency <= served["base"]["wall_s"] for latency in latencies)
