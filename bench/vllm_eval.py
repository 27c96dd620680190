"""Benchmark: the same greedy evaluation prompts through vLLM and through the transformers backend, in one run.

Run with `.venv-vllm`'s Python (`make vllm`), which has both:
    .venv-vllm/bin/python bench/vllm_eval.py [--model demo] [--adapter DIR] [--sample 32]
        [--batch-size 16] [--max-new-tokens 64] [--device cpu|cuda] [--bfcl FILE]

Seeded BFCL simple_python prompts rendered by the trainer; each backend generates them all,
base model and then through the adapter when one is given (vLLM: one engine answering both
ways, `VllmBackend.with_adapter`). Each pass is timed around `generate`, after one warm-up
call per backend; prints seconds, generated tokens per second, the ratio vLLM / transformers
in tokens per second, and how many answers are the same text from the same number of tokens.
The engine's start is reported apart (it is paid once per job). Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

BFCL = REPO_ROOT.parent / "shared" / "external" / "bfcl"


def timed(backend, prompts, sampling):
    backend.generate(prompts[:2], sampling)  # warm-up: compilation, caches
    started = time.perf_counter()
    generations = backend.generate(prompts, sampling)
    seconds = time.perf_counter() - started
    answers = [samples[0] for samples in generations]
    return answers, seconds, sum(answer.completion_tokens for answer in answers) / seconds


def main() -> int:
    from trainer.adapters import load_adapter
    from trainer.models import load_model, resolve_model
    from trainer.prompts import render_prompt
    from trainer.rollout import TransformersBackend, VllmBackend
    from trainer.spec.bfcl import load_bfcl_tasks
    from trainer.spec.eval import SamplingConfig
    from trainer.spec.tasks import seeded_sample

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--adapter", help="a LoRA adapter folder (with its manifest) to measure as well")
    parser.add_argument("--sample", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16, help="the transformers backend's batch")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu", help="the transformers backend's device (vLLM picks its own)")
    parser.add_argument("--bfcl", type=Path, default=BFCL / "BFCL_v4_simple_python.json", help="BFCL questions")
    args = parser.parse_args()

    tasks = seeded_sample(load_bfcl_tasks(args.bfcl), args.sample, 0)
    loaded = load_model(args.model, args.device)
    prompts = [render_prompt(task, loaded.tokenizer) for task in tasks]
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    started = time.perf_counter()
    engine = VllmBackend(resolve_model(args.model), loaded.tokenizer, args.adapter)
    report: dict[str, object] = {"model": loaded.path, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                                 "vllm_engine_start_s": round(time.perf_counter() - started, 1)}  # fmt: skip
    models = [("base", loaded.model, engine.with_adapter(None))]
    if args.adapter:
        models.append(("adapter", load_adapter(load_model(args.model, args.device).model, args.adapter), engine))
    for name, model, vllm in models:
        ours, ours_s, ours_rate = timed(TransformersBackend(model, loaded.tokenizer, args.device), prompts, sampling)
        theirs, theirs_s, theirs_rate = timed(vllm, prompts, sampling)
        same = sum((a.text, a.completion_tokens) == (b.text, b.completion_tokens)
                   for a, b in zip(ours, theirs, strict=True))
        report[name] = {"transformers_s": round(ours_s, 1), "vllm_s": round(theirs_s, 1),
                        "transformers_tokens_per_s": round(ours_rate, 1), "vllm_tokens_per_s": round(theirs_rate, 1),
                        "ratio_vllm_over_transformers": round(theirs_rate / ours_rate, 2),
                        "same_answers": f"{same}/{len(prompts)}"}  # fmt: skip
        print(f"{name}: transformers {ours_s:.1f} s, vLLM {theirs_s:.1f} s; tokens/s ratio vLLM / transformers "
              f"{theirs_rate / ours_rate:.2f}; same answers {same}/{len(prompts)}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":  # vLLM's engine spawns processes that import this module again
    raise SystemExit(main())
