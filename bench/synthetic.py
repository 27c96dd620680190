"""Synthetic variants of the demo's train splits: how many each filter rejects, and how many are kept.

    PYTHONPATH=. .venv/bin/python -m bench.synthetic [--tasks bfcl|workbench] [--seed 0] [--out accepted.jsonl]

It loads a split as the demo and the learning run load it: BFCL simple_python
(`trainer.spec.bfcl.bfcl_split`: 300 train, 100 held-out) or WorkBench's single-call tasks
(`trainer.spec.workbench.workbench_split`: 30 train, 11 held-out, split by template), generates the
template variants of every train task (`trainer.spec.synthetic`), screens them (values kept, schema,
the `tool_call` verifier, the environment, train duplicates, held-out near-duplicates, mutual
near-duplicates) and prints the counts at each filter, overall and per method, with an example
rejection of each filter. The environment filter plays each variant's expected calls in
`--environment` (default: `workbench` for WorkBench's tasks, none for BFCL's, whose tools have no
sandbox). The held-out tasks are read for the near-duplicate guard only; nothing is scored on them.
`--out` writes the accepted variants as a task file (what an SFT run on train plus
variants would add). `--app-check` adds the app's strict value check to the schema filter, as the
batch service does (`flywheel.datasets.validation`; it sets Django up, no database is touched).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from trainer.contracts import Task
from trainer.environments import make_environment
from trainer.spec.bfcl import bfcl_split
from trainer.spec.synthetic import (
    METHODS,
    NO_ENVIRONMENT,
    EnvironmentFilter,
    Options,
    Screened,
    counts,
    generate,
    screen,
)
from trainer.spec.tasks import write_tasks
from trainer.spec.workbench import workbench_split
from trainer.verifiers import get_verifier

EXTERNAL = Path("/work/shared/external")


def _per_method(screened: list[Screened]) -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = defaultdict(Counter)
    for item in screened:
        table[item.variant.method]["generated"] += 1
        table[item.variant.method][item.rejection.filter if item.rejection else "accepted"] += 1
    return table


def _app_check() -> Callable[[Task], list[str]]:
    """The app's strict schema check (what `task_create` refuses for a task not imported from a file)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")
    import django

    django.setup()
    from flywheel.datasets.validation import task_problems

    return lambda task: task_problems(task).refusals(strict=True)


def _split(tasks: str, external: Path) -> tuple[list[Task], list[Task]]:
    if tasks == "workbench":
        train, heldout, _templates = workbench_split(external)
        return train, heldout
    return bfcl_split(external)


def _environment(name: str | None) -> EnvironmentFilter:
    return EnvironmentFilter.of(name, make_environment(name)) if name else NO_ENVIRONMENT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", choices=("bfcl", "workbench"), default="bfcl")
    parser.add_argument("--environment", help="where the variants' calls are played (workbench for WorkBench)")
    parser.add_argument("--external", type=Path, default=EXTERNAL)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-method", type=int, default=2)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated generation methods (all)")
    parser.add_argument("--out", type=Path, help="write the accepted variants here (task JSONL)")
    parser.add_argument("--app-check", action="store_true", help="add the app's strict value check, as the app does")
    args = parser.parse_args()
    train, heldout = _split(args.tasks, args.external)
    playing = _environment(args.environment or ("workbench" if args.tasks == "workbench" else None))
    options = Options(methods=tuple(args.methods.split(",")), seed=args.seed, per_method=args.per_method)
    started = time.perf_counter()
    screened = screen(generate(train, options), verifier=get_verifier("tool_call"), train=train, heldout=heldout,
                      threshold=options.threshold, heldout_threshold=options.heldout_threshold,
                      extra_check=_app_check() if args.app_check else None, environment=playing)  # fmt: skip
    seconds = time.perf_counter() - started
    report = counts(screened, playing)
    filters = list(report["rejected"])
    print(f"{args.tasks}: {len(train)} train seeds, {len(heldout)} held-out (near-duplicate guard only)")
    print(f"app's strict value check: {'applied' if args.app_check else 'not applied'}")
    environment = report["environment"]
    played = f"played in {environment['name']}" if environment["applied"] else f"not applied: {environment['skipped']}"
    print(f"environment filter: {played}")
    print(f"seed {args.seed}, {args.per_method} per method and seed, thresholds: mutual {options.threshold}, "
          f"held-out {options.heldout_threshold} (character {5}-gram Jaccard); {seconds:.1f} s")  # fmt: skip
    print(f"generated {report['generated']}")
    for name in filters:
        print(f"  rejected by {name:<24} {report['rejected'][name]}")
    print(f"accepted {report['accepted']}")
    print("\nper method:  " + "  ".join(f"{column:>10}" for column in ("generated", *filters, "accepted")))
    for method, row in sorted(_per_method(screened).items()):
        print(f"{method:<12} " + "  ".join(f"{row[column]:>10}" for column in ("generated", *filters, "accepted")))
    print("\nan example of each filter's rejections:")
    for name in filters:
        example = next((item for item in screened if item.rejection and item.rejection.filter == name), None)
        if example is not None and example.rejection is not None:
            print(f"  {name}: {example.variant.task.id} ({example.variant.change[:80]}): {example.rejection.reason}")
    if args.out:
        write_tasks(args.out, [item.variant.task for item in screened if item.accepted])
        print(f"\nwrote {report['accepted']} accepted variants to {args.out}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
