from __future__ import annotations

import sys
import types

import pytest
import torch

from tests.trainer.tiny_model import TINY_MODEL, tiny_model
from trainer.jobs import JobStopped
from trainer.rollout import (
    BackendUnavailable,
    GenerationHooks,
    TransformersBackend,
    VllmBackend,
    backend_choice,
    import_vllm,
    open_runtime,
    stop_token_ids,
)
from trainer.spec.eval import SamplingConfig

PROMPTS = [
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nFind the area of a triangle with a base of 10 units.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nDelete my first meeting<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def backend():
    loaded = tiny_model()
    return TransformersBackend(loaded.model, loaded.tokenizer, loaded.device)


def test_each_prompt_gets_n_completions_in_prompt_order(backend):
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.0, num_samples=2, batch_size=2, seed=1)
    results = backend.generate(PROMPTS, sampling)
    assert [len(samples) for samples in results] == [2, 2, 2]
    lengths = [len(backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]) for prompt in PROMPTS]
    # Batches are sorted by length and left-padded; the counts show each result is its own prompt's.
    assert [samples[0].prompt_tokens for samples in results] == lengths
    assert all(1 <= sample.completion_tokens <= 6 for samples in results for sample in samples)


def test_greedy_decoding_repeats_and_sampling_follows_the_seed(backend):
    def texts(sampling):
        return [(samples[0].text, samples[0].completion_tokens) for samples in backend.generate(PROMPTS, sampling)]

    greedy = SamplingConfig(max_new_tokens=8)
    assert texts(greedy) == texts(greedy)
    sampled = SamplingConfig(max_new_tokens=8, temperature=1.0, seed=5)
    assert texts(sampled) == texts(sampled)
    assert texts(sampled) != texts(SamplingConfig(max_new_tokens=8, temperature=1.0, seed=6))


def test_batched_greedy_output_matches_one_prompt_at_a_time(backend):
    sampling = SamplingConfig(max_new_tokens=8)
    batched = [samples[0].text for samples in backend.generate(PROMPTS, sampling)]
    single = [backend.generate([prompt], sampling)[0][0].text for prompt in PROMPTS]
    assert batched == single


def test_a_completion_stops_at_the_end_of_turn_and_counts_it(backend):
    end = backend.tokenizer.convert_tokens_to_ids("<|im_end|>")
    hello = backend.tokenizer("hello", add_special_tokens=False)["input_ids"]
    stopped = backend._generation([*hello, end, end, end], prompt_tokens=4, latency=0.5)
    assert (stopped.text, stopped.completion_tokens, stopped.finished) == ("hello", len(hello) + 1, True)
    cut = backend._generation(hello, prompt_tokens=4, latency=0.5)
    assert (cut.completion_tokens, cut.finished) == (len(hello), False)


def test_the_token_limit_cuts_a_completion_off(backend):
    result = backend.generate(PROMPTS[:1], SamplingConfig(max_new_tokens=3))[0][0]
    assert result.completion_tokens <= 3
    assert result.finished or result.completion_tokens == 3


def test_end_of_turn_tokens_include_chatml_im_end(backend):
    assert backend.tokenizer.convert_tokens_to_ids("<|im_end|>") in stop_token_ids(backend.tokenizer)


def test_progress_is_reported_per_batch(backend):
    seen = []
    backend.generate(
        PROMPTS,
        SamplingConfig(max_new_tokens=2, batch_size=2),
        GenerationHooks(on_progress=lambda done, total: seen.append((done, total))),
    )
    assert seen == [(2, 3), (3, 3)]


def test_a_stop_request_ends_generation_with_job_stopped(backend):
    with pytest.raises(JobStopped):
        backend.generate(PROMPTS, SamplingConfig(max_new_tokens=50), GenerationHooks(should_stop=lambda: True))


def test_a_stop_request_during_a_batch_interrupts_it(backend):
    checks = []

    def should_stop():
        checks.append(1)
        return len(checks) > 3

    with pytest.raises(JobStopped):
        backend.generate(PROMPTS, SamplingConfig(max_new_tokens=500, batch_size=3), GenerationHooks(should_stop))
    # Checked before the batch, then after each token: the batch ended after a couple of its 500 tokens.
    assert len(checks) == 5


def test_sampling_settings_are_validated():
    with pytest.raises(ValueError):
        SamplingConfig(num_samples=0)
    with pytest.raises(ValueError):
        SamplingConfig(temperature=-1)
    assert SamplingConfig().greedy and not SamplingConfig(temperature=0.7).greedy


def test_without_vllm_the_vllm_backend_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(BackendUnavailable, match="make vllm") as caught:
        import_vllm()
    assert caught.value.kind == "backend_unavailable"
    with pytest.raises(BackendUnavailable):
        VllmBackend(str(TINY_MODEL), tiny_model().tokenizer)
    assert backend_choice("auto") == "transformers"
    with pytest.raises(BackendUnavailable):
        open_runtime(str(TINY_MODEL), None, backend="vllm")


def test_a_vllm_built_for_a_gpu_without_one_is_unavailable(monkeypatch):
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: False)
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BackendUnavailable, match="CUDA GPU or vLLM's CPU build"):
        import_vllm()
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: True)
    assert import_vllm() is sys.modules["vllm"]
