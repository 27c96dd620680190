"""The `synth` job's config and its torch-free half: asking a local model to paraphrase requests.

A `synth` job (`trainer.synth`) loads a model, asks it to rewrite each seed task's request
(`paraphrase_task`: an instruction and the request, no tools), reads the rewrite back
(`read_paraphrase`) and turns each into a variant of its seed (`model_variants`, method
`model_paraphrase`) that then goes through the same filters as the template variants
(`trainer.spec.synthetic.screen`): values kept, schema, verifier, environment (the spec's
`environment`, the agent's where the launch names none), duplicates. The app reads the written
variants file into a synthetic batch. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trainer.contracts import Task
from trainer.spec.config import check_at_least
from trainer.spec.environments import check_executing_environment
from trainer.spec.eval import BACKENDS, SamplingConfig
from trainer.spec.synthetic import DEFAULT_THRESHOLD, HELDOUT_THRESHOLD, Variant, written_values
from trainer.verifiers import verifier_names

METHOD = "model_paraphrase"
INSTRUCTION = (
    "Rewrite the user's request in other words. Keep every number, name and value exactly as written. "
    "Answer with the rewritten request only."
)
_LEADS = ("rewritten request:", "rewritten:", "request:", "paraphrase:")


@dataclass(frozen=True)
class SynthConfig:
    """A synth job's settings, read from the spec's `hyperparameters`."""

    backend: str = field(default="transformers", metadata={"help": "Generation backend: transformers, vllm, auto."})
    device: str = field(default="auto", metadata={"help": "Torch device for transformers: auto, cpu, cuda ..."})
    paraphrases: int = field(default=2, metadata={"help": "Rewrites asked of the model per seed task."})
    max_new_tokens: int = field(default=96, metadata={"help": "Most tokens of one rewrite."})
    temperature: float = field(default=0.8, metadata={"help": "Sampling temperature (0: greedy, one rewrite)."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling mass."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per generation batch (transformers)."})
    verifier: str = field(default="tool_call", metadata={"help": "The verifier the expected calls must pass."})
    environment: str | None = field(default=None, metadata={
        "help": "Where each variant's expected calls are played, and must run cleanly and pass (workbench, a team's "
                "entry point or MCP server); the agent's when the launch names none; null for none."})  # fmt: skip
    threshold: float = field(default=DEFAULT_THRESHOLD, metadata={"help": "Near-duplicate similarity of variants."})
    heldout_threshold: float = field(
        default=HELDOUT_THRESHOLD, metadata={"help": "Similarity to a held-out task at which a variant is dropped."}
    )

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; known: {', '.join(BACKENDS)}")
        check_at_least(self, 1, "paraphrases", "max_new_tokens", "batch_size")
        if self.verifier not in verifier_names():
            raise ValueError(f"unknown verifier {self.verifier!r}; known: {', '.join(verifier_names())}")
        if self.environment != "single_step":  # the agent's may be; the batch report then says it judged nothing
            check_executing_environment(self.environment)
        if not (0.0 < self.threshold <= 1.0 and 0.0 < self.heldout_threshold <= 1.0):
            raise ValueError("thresholds must be in (0, 1]")
        self.sampling(seed=0)  # SamplingConfig checks temperature and top_p

    def sampling(self, seed: int) -> SamplingConfig:
        samples = 1 if self.temperature == 0 else self.paraphrases
        return SamplingConfig(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                              num_samples=samples, batch_size=self.batch_size, seed=seed)  # fmt: skip


def request_of(task: Task) -> str:
    users = [m for m in task.messages if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return str(users[-1]["content"]) if users else ""


def paraphrase_task(seed: Task) -> Task:
    """What the model is asked: the instruction and the seed's request, no tools."""
    messages = [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": request_of(seed)}]
    return Task(id=f"{seed.id}~ask", messages=messages, tools=[], expected_calls=[], no_call_expected=True)


def read_paraphrase(text: str) -> str:
    """The rewrite in a model's answer: its first non-empty line, without a lead-in ("Rewritten request:") or quotes."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    for lead in _LEADS:
        if line.lower().startswith(lead):
            line = line[len(lead) :].strip()
    return line.strip("\"'` ").strip()


def model_variants(seeds: Sequence[Task], outputs: Sequence[Sequence[str]]) -> list[Variant]:
    """A variant per distinct, non-empty rewrite of each seed's request (`outputs[i]` rewrites `seeds[i]`)."""
    variants = []
    for seed, texts in zip(seeds, outputs, strict=True):
        original = request_of(seed)
        rewrites = dict.fromkeys(text for text in map(read_paraphrase, texts) if text and text != original)
        for number, rewrite in enumerate(rewrites, start=1):
            task = replace(seed, id=f"{seed.id}~{METHOD}{number}", messages=_with_request(seed.messages, rewrite))
            change = f"request: {original!r} → {rewrite!r}"
            variants.append(Variant(task, seed.id, METHOD, change, written_values(seed)))
    return variants


def _with_request(messages: list[dict[str, Any]], request: str) -> list[dict[str, Any]]:
    copied = [dict(message) for message in messages]
    last_user = max(index for index, message in enumerate(copied) if message.get("role") == "user")
    copied[last_user]["content"] = request
    return copied
