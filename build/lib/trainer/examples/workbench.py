"""Write WorkBench's single-call, no-lookup tasks (`trainer.spec.workbench`) to a task file, for the baseline.

Run: python -m trainer.examples.workbench --external ../shared/external --out tasks.jsonl
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from trainer.spec.tasks import write_tasks
from trainer.spec.workbench import single_call_tasks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--external", type=Path, required=True, help="the shared external data folder")
    parser.add_argument("--out", type=Path, required=True, help="where to write the task JSONL")
    args = parser.parse_args(argv)
    tasks = list(single_call_tasks(args.external))
    write_tasks(args.out, tasks)
    print(f"wrote {len(tasks)} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
