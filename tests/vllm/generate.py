"""Run by tests/vllm with .venv-vllm's Python: greedy answers of the vllm backend, base and through an adapter.

Usage: python tests/vllm/generate.py REQUEST.json RESULT.json, where the request names the model,
the adapter folder, the prompts and max_new_tokens. One engine answers both ways (`VllmBackend.with_adapter`).
The result holds each prompt's `Generation` as JSON, base and adapter, and the wall time of each call.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path


def main() -> None:
    from trainer.models import load_tokenizer
    from trainer.rollout import VllmBackend
    from trainer.spec.eval import SamplingConfig

    request = json.loads(Path(sys.argv[1]).read_text())
    tokenizer = load_tokenizer(request["model"])
    backend = VllmBackend(request["model"], tokenizer, request["adapter"], seed=0)
    sampling = SamplingConfig(max_new_tokens=request["max_new_tokens"])
    result = {}
    for name, answering in (("base", backend.with_adapter(None)), ("adapter", backend)):
        started = time.perf_counter()
        generations = answering.generate(request["prompts"], sampling)
        result[name] = {"wall_s": time.perf_counter() - started,
                        "generations": [asdict(samples[0]) for samples in generations]}
    Path(sys.argv[2]).write_text(json.dumps(result))


if __name__ == "__main__":  # vLLM's engine spawns processes that import this module again
    main()
