#!/usr/bin/env bash
# The whole learning run of one task set, stage after stage, stopping at the first that fails:
# SFT, its held-out eval, hard-task mining from the SFT adapter (train tasks only), GRPO from the SFT
# adapter on the mined tasks, its held-out eval, and the base model's held-out eval.
# Usage (from the repository root, after `python -m trainer.examples.learning.prepare`):
#   trainer/examples/learning/pipeline.sh bfcl|workbench|workbench_multi
set -eu
set=$1
L=trainer/examples/learning
for stage in sft:sft sft_eval:eval mine:mine grpo_mined:grpo grpo_mined_eval:eval baseline:eval; do
    spec=${stage%%:*} kind=${stage##*:}
    "$L/run_stage.sh" "$kind" "$L/${set}_${spec}.json" "$set-${spec//_/-}"
done
