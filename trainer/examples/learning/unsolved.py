"""Write the train tasks the starting policy does not solve yet: harder prompts for GRPO.

After SFT most BFCL train prompts are answered right by greedy decoding, so most GRPO groups tie
(every completion scores 1) and give no gradient. This keeps the train tasks whose greedy answer
the eval job's verifier did not pass, read from that job's `results.jsonl` over the train file.
Only train tasks and their own results decide: the held-out set plays no part.

Checks, each an error when it fails: the results cover exactly the train file's tasks (an eval
over another file, or a cut-short one, is refused).

Run from the repository root:
    python -m trainer.examples.learning.unsolved --tasks var/learning/data/bfcl_train.jsonl \
        --results var/learning/runs/bfcl-sft-train-eval/results.jsonl --out var/learning/data/bfcl_train_unsolved.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.contracts import Task
from trainer.evaluate import load_tasks


def unsolved(tasks: Sequence[Task], results: Mapping[str, Mapping[str, Any]]) -> list[Task]:
    """The tasks whose result did not pass the verifier, in the train file's order."""
    task_ids, result_ids = {task.id for task in tasks}, set(results)
    if task_ids != result_ids:
        missing, foreign = sorted(task_ids - result_ids), sorted(result_ids - task_ids)
        raise SystemExit(f"the results do not cover the train tasks: {len(missing)} without a result "
                         f"{missing[:3]}, {len(foreign)} results of other tasks {foreign[:3]}")
    return [task for task in tasks if not results[task.id]["verifier_pass"]]


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {row["task_id"]: row for row in rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, required=True, help="the train task file the eval ran on")
    parser.add_argument("--results", type=Path, required=True, help="the eval job's results.jsonl")
    parser.add_argument("--out", type=Path, required=True, help="where to write the unsolved train tasks")
    args = parser.parse_args(argv)
    tasks = load_tasks([str(args.tasks)])
    kept = unsolved(tasks, read_results(args.results))
    args.out.write_text("".join(task.to_json_line() + "\n" for task in kept), encoding="utf-8")
    print(f"{args.out}: {len(kept)} of {len(tasks)} train tasks unsolved")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
