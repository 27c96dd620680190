"""Benchmark: seconds per GRPO step through `python -m trainer grpo` and through bare TRL, in one run.

Both runs use the same model, tasks, prompts (the runtime's renderer), LoRA settings and GRPO
configuration for the same number of steps, with no held-out evaluation and no checkpoints so
that only the training loop is compared. The bare run is a minimal script that builds TRL's
`GRPOTrainer` directly with a reward function calling the same verifier; ours is the job
command as the worker runs it (its own process, the protocol's events on stdout). Seconds per
step come from the steps after the first (the first includes warm-up) for both, read from the
step timestamps. Prints the ratio ours / bare (target: at most 1.0); asserts nothing.

Run: .venv/bin/python bench/train.py [--model demo|PATH] [--tasks T.jsonl] [--steps 10] [--generations 4]
[--tokens 64]
Default model: the tiny test model; `--model demo` measures SmolLM2-135M-Instruct. Default tasks:
trainer/examples/tiny_tasks.jsonl, whose long WorkBench prompts dominate a real model's step time;
BFCL's shorter ones (`var/learning/data/bfcl_train.jsonl`, written by
`python -m trainer.examples.learning.prepare`) make a steadier measure on the demo model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TASKS = REPO_ROOT / "trainer" / "examples" / "tiny_tasks.jsonl"
TINY_MODEL = REPO_ROOT / "tests" / "fixtures" / "tiny-model"


def hyperparameters(args: argparse.Namespace) -> dict:
    """Ours, set to what the bare script runs: TRL's defaults, where ours differ by default, and no redraws.

    Our length check would refuse the tiny tasks' long answers at 64 tokens; it only reads, so it is
    let through. Dynamic sampling regenerates a tied batch, work the bare script never does.
    """
    return {"num_generations": args.generations, "max_steps": args.steps, "max_completion_length": args.tokens,
            "learning_rate": 1e-5, "eval_interval": 0, "checkpoint_interval": 0, "device": "cpu",
            "max_truncated_share": 1.0, "dynamic_sampling_redraws": 0, "mask_truncated_completions": False}


def ours(args: argparse.Namespace, folder: Path) -> list[float]:
    """Step times of the job command, from the arrival time of each step's first metric event."""
    spec = {"kind": "grpo", "base_model": args.model, "task_paths": [str(args.tasks)],
            "output_dir": str(folder / "ours"), "seed": 0, "hyperparameters": hyperparameters(args)}
    (folder / "run.json").write_text(json.dumps(spec))
    process = subprocess.Popen([sys.executable, "-m", "trainer", "grpo", "--spec", str(folder / "run.json")],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    seen: dict[int, float] = {}
    for line in process.stdout:
        event = json.loads(line)
        if event["event"] == "metric" and event["step"] not in seen:
            seen[event["step"]] = time.perf_counter()
        if event["event"] == "error":
            raise SystemExit(f"ours failed: {event['message']}")
    process.wait()
    return [seen[step] for step in sorted(seen)]


def bare(args: argparse.Namespace, folder: Path) -> list[float]:
    """Step times of a minimal GRPOTrainer script with the same configuration."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.models import load_model
    from trainer.prompts import render_prompt
    from trainer.spec.tasks import load_tasks
    from trainer.verifiers import get_verifier

    tasks = {task.id: task for task in load_tasks([str(args.tasks)])}
    verifier = get_verifier("tool_call")
    loaded = load_model(args.model, "cpu")

    def reward(prompts, completions, task_id, **_):
        return [v.reward for v in verifier.verify([tasks[i] for i in task_id], completions)]

    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, *_args, **_kwargs):
            stamps.append(time.perf_counter())

    config = GRPOConfig(
        output_dir=str(folder / "bare"), max_steps=args.steps, per_device_train_batch_size=args.generations,
        num_generations=args.generations, max_completion_length=args.tokens, learning_rate=1e-5, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True, bf16=False, seed=0, beta=0.0,
        gradient_checkpointing=False,  # TRL turns it on by default; ours leaves it off on a CPU, where it only costs
    )  # fmt: skip
    rows = [{"prompt": render_prompt(task, loaded.tokenizer), "task_id": task.id} for task in tasks.values()]
    dataset = Dataset.from_list(rows)
    trainer = GRPOTrainer(
        model=loaded.model, reward_funcs=[reward], args=config, train_dataset=dataset,
        processing_class=loaded.tokenizer, callbacks=[Stamp()],
        peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                               task_type="CAUSAL_LM"),
    )  # fmt: skip
    trainer.train()
    return stamps


def per_step(stamps: list[float]) -> float:
    steps = stamps[1:]  # the first step carries the warm-up
    return (steps[-1] - steps[0]) / (len(steps) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(TINY_MODEL))
    parser.add_argument("--tasks", type=Path, default=TASKS)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    args.tasks = args.tasks.resolve()
    with tempfile.TemporaryDirectory() as folder:
        bare_step = per_step(bare(args, Path(folder)))
        ours_step = per_step(ours(args, Path(folder)))
    print(f"model {args.model}, tasks {args.tasks}, {args.steps} steps of {args.generations} generations x "
          f"{args.tokens} tokens")
    print(f"bare TRL GRPOTrainer: {bare_step:.3f} s/step")
    print(f"python -m trainer grpo: {ours_step:.3f} s/step")
    print(f"ratio ours / bare: {ours_step / bare_step:.3f} (target: at most 1.0)")


if __name__ == "__main__":
    main()
