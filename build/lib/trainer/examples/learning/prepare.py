"""Write the train and held-out task files of the CPU learning run (baseline -> SFT -> GRPO), leak-free.

Deterministic: the same inputs give byte-identical files.

- BFCL simple_python (400 tasks, the same tasks as `python -m trainer tasks from-bfcl --questions
  ../shared/external/bfcl/BFCL_v4_simple_python.json --answers
  ../shared/external/bfcl/possible_answer/BFCL_v4_simple_python.json`): the held-out set is the
  seeded sample of 100 that the committed baseline evaluates (`trainer.spec.tasks.seeded_sample`,
  seed 0, so the baseline numbers in docs/trainer.md are over exactly these tasks), train is the
  other 300.
- WorkBench single-call, no-lookup tasks (`trainer.spec.workbench`, 41 tasks): split by the
  WorkBench row's `base_template` (the task metadata keeps only the domain, so the template is read
  back from the CSV row the task id names), so that every paraphrase and slot filling of one
  template lands in the same split. A seeded third of the templates, rounded, is held out. The
  41 tasks come from only 5 templates, one per tool, so the held-out tasks call tools that no
  train task calls: a test of the format on unseen tools, not of more examples of seen ones.

- WorkBench whole (`trainer.spec.workbench.episode_tasks`, all 690 tasks, played as episodes in
  the `workbench` environment: lookups, several calls, or none): split by `base_template` the same
  way (`workbench_multi_split`), into `workbench_multi_train.jsonl` / `workbench_multi_heldout.jsonl`.

Checks, each an error when it fails: no request text (the last user message) and no task id in
both splits, no WorkBench template in both. Also writes `split.json` (counts, ids, templates).

Run from the repository root: python -m trainer.examples.learning.prepare [--external DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.contracts import Task
from trainer.spec.bfcl import SPLIT_SEED, bfcl_split
from trainer.spec.tasks import last_user_text, write_tasks
from trainer.spec.workbench import workbench_multi_split, workbench_split

REPO = Path(__file__).resolve().parents[3]


def check_disjoint(name: str, train: Sequence[Task], heldout: Sequence[Task]) -> None:
    """Fail when a task id or a request text is in both splits."""
    if {task.id for task in train} & {task.id for task in heldout}:
        raise SystemExit(f"{name}: a task id is in both splits")
    shared = {last_user_text(task).strip() for task in train} & {last_user_text(task).strip() for task in heldout}
    if shared:
        raise SystemExit(f"{name}: {len(shared)} request texts are in both splits, e.g. {sorted(shared)[0]!r}")


def summary(train: Sequence[Task], heldout: Sequence[Task], **extra: Any) -> dict[str, Any]:
    return {"train": len(train), "heldout": len(heldout), "heldout_ids": [task.id for task in heldout], **extra}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--external",
        type=Path,
        default=REPO.parent / "shared" / "external",
        help="the shared external data folder (default: ../shared/external)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "var" / "learning" / "data",
        help="where to write the task files (default: var/learning/data)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    bfcl_train, bfcl_heldout = bfcl_split(args.external)
    check_disjoint("bfcl", bfcl_train, bfcl_heldout)
    wb_train, wb_heldout, templates = workbench_split(args.external)
    check_disjoint("workbench", wb_train, wb_heldout)
    multi_train, multi_heldout, multi_templates = workbench_multi_split(args.external)
    check_disjoint("workbench_multi", multi_train, multi_heldout)

    files: Mapping[str, Sequence[Task]] = {
        "bfcl_train.jsonl": bfcl_train, "bfcl_heldout.jsonl": bfcl_heldout,
        "workbench_train.jsonl": wb_train, "workbench_heldout.jsonl": wb_heldout,
        "workbench_multi_train.jsonl": multi_train, "workbench_multi_heldout.jsonl": multi_heldout,
    }  # fmt: skip
    for name, tasks in files.items():
        write_tasks(args.out / name, tasks)
    report = {
        "seed": SPLIT_SEED,
        "bfcl_simple_python": summary(bfcl_train, bfcl_heldout),
        "workbench_single_call": summary(wb_train, wb_heldout, templates=templates),
        "workbench_multi": summary(multi_train, multi_heldout, templates=multi_templates),
    }
    (args.out / "split.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for name, tasks in files.items():
        print(f"{args.out / name}: {len(tasks)} tasks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
