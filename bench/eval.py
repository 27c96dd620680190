"""Benchmark: the same tasks evaluated batched and one prompt at a time, in one run; prints the ratio.

Default: the demo model (SmolLM2-135M-Instruct) on a seeded sample of 100 BFCL
simple_python tasks, greedy, 128 new tokens at most, batches of 16. Both passes load the
model once and run the whole evaluation (render, generate, verify); the ratio is
one-at-a-time wall time over batched wall time (the target is at least 3). It also
reports how many greedy answers came out identical both ways (padding can change float
rounding, and so an argmax now and then), and each pass's valid-JSON rate.
With `--vllm` on a machine with vLLM and a GPU, it adds vLLM's tokens per second on the
same prompts. No timing is asserted anywhere; this prints.

Run: .venv/bin/python bench/eval.py [--sample 100] [--batch-size 16] [--vllm]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from trainer.evaluate import Evaluation, evaluate_tasks, summarize  # noqa: E402
from trainer.models import load_model, resolve_model  # noqa: E402
from trainer.prompts import render_prompt  # noqa: E402
from trainer.rollout import TransformersBackend, VllmBackend, vllm_available  # noqa: E402
from trainer.spec.bfcl import load_bfcl_tasks  # noqa: E402
from trainer.spec.eval import SamplingConfig  # noqa: E402
from trainer.spec.tasks import seeded_sample  # noqa: E402
from trainer.verifiers import SafetyPolicy, get_verifier  # noqa: E402

BFCL = REPO_ROOT.parent / "shared" / "external" / "bfcl"


def timed_pass(tasks, evaluation, sampling):
    started = time.perf_counter()
    results = evaluate_tasks(tasks, evaluation, sampling)
    return results, time.perf_counter() - started


def vllm_tokens_per_second(model_path, prompts, sampling):
    from trainer.models import load_tokenizer

    backend = VllmBackend(model_path, load_tokenizer(model_path), seed=sampling.seed)
    backend.generate(prompts[:2], sampling)  # warm-up: compilation and CUDA graphs
    started = time.perf_counter()
    generated = backend.generate(prompts, sampling)
    elapsed = time.perf_counter() - started
    return sum(samples[0].completion_tokens for samples in generated) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description="batched vs one-at-a-time evaluation")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--sample", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--vllm", action="store_true", help="also measure vLLM (.venv-vllm's Python, or a GPU)")
    args = parser.parse_args()

    tasks = seeded_sample(load_bfcl_tasks(BFCL / "BFCL_v4_simple_python.json",
                                          BFCL / "possible_answer" / "BFCL_v4_simple_python.json"),
                          args.sample, args.seed)
    loaded = load_model(args.model)
    backend = TransformersBackend(loaded.model, loaded.tokenizer, loaded.device)
    evaluation = Evaluation(backend=backend, render=lambda task: render_prompt(task, loaded.tokenizer),
                            verifier=get_verifier("bfcl"), policy=SafetyPolicy.default())
    batched_config = SamplingConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=args.seed)
    single_config = SamplingConfig(max_new_tokens=args.max_new_tokens, batch_size=1, seed=args.seed)

    batched, batched_s = timed_pass(tasks, evaluation, batched_config)
    single, single_s = timed_pass(tasks, evaluation, single_config)
    tokens = sum(result.completion_tokens for result in batched)
    same = sum(a.output == b.output for a, b in zip(batched, single, strict=True))
    report = {
        "model": loaded.path, "device": loaded.device, "tasks": len(tasks), "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
        "batched_s": round(batched_s, 1), "one_at_a_time_s": round(single_s, 1),
        "ratio": round(single_s / batched_s, 2),
        "batched_tokens_per_s": round(tokens / batched_s, 1),
        "one_at_a_time_tokens_per_s": round(sum(r.completion_tokens for r in single) / single_s, 1),
        "identical_answers": f"{same}/{len(tasks)}",
        "valid_json_rate": {"batched": summarize(batched, 200)["valid_json_rate"]["value"],
                            "one_at_a_time": summarize(single, 200)["valid_json_rate"]["value"]},
    }
    if args.vllm:
        prompts = [render_prompt(task, loaded.tokenizer) for task in tasks]
        report["vllm_tokens_per_s"] = (round(vllm_tokens_per_second(resolve_model(args.model), prompts,
                                                                    batched_config), 1)
                                       if vllm_available() else "unavailable: use .venv-vllm's Python (make vllm)")
    print(f"batched (batch {args.batch_size}): {batched_s:.1f} s; one at a time: {single_s:.1f} s; "
          f"ratio {report['ratio']}x; identical answers {same}/{len(tasks)}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
