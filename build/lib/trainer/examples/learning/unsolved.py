"""Write the train tasks the starting policy does not solve yet: harder prompts for GRPO.

After SFT most BFCL train prompts are answered right by greedy decoding, so most GRPO groups tie
(every completion scores 1) and give no gradient. This keeps the train tasks whose greedy answer
the eval job's verifier did not pass, read from that job's `results.jsonl` over the train file
(all of it, or a seeded sample: `sample_size`). Only train tasks and their own results decide:
the held-out set plays no part.

Checks, each an error when it fails: every result is of a task in the train file (the results of
an evaluation over another file are refused).

Run from the repository root:
    python -m trainer.examples.learning.unsolved --tasks var/learning/data/bfcl_train.jsonl \
        --results var/learning/runs/bfcl-sft-train-eval/results.jsonl --out var/learning/data/bfcl_train_unsolved.jsonl
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.contracts import Task
from trainer.examples.learning.report import read_results
from trainer.spec.tasks import load_tasks, write_tasks


def unsolved(tasks: Sequence[Task], results: Mapping[str, Mapping[str, Any]]) -> list[Task]:
    """The evaluated tasks whose result did not pass the verifier, in the train file's order."""
    foreign = sorted(set(results) - {task.id for task in tasks})
    if foreign:
        raise SystemExit(f"{len(foreign)} results are of tasks not in the train file, e.g. {foreign[:3]}")
    return [task for task in tasks if task.id in results and not results[task.id]["verifier_pass"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, required=True, help="the train task file the eval ran on")
    parser.add_argument("--results", type=Path, required=True, help="the eval job's results.jsonl")
    parser.add_argument("--out", type=Path, required=True, help="where to write the unsolved train tasks")
    args = parser.parse_args(argv)
    tasks = load_tasks([str(args.tasks)])
    results = read_results(args.results)
    kept = unsolved(tasks, results)
    write_tasks(args.out, kept)
    print(f"{args.out}: {len(kept)} of {len(results)} evaluated train tasks unsolved ({len(tasks)} in the file)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
