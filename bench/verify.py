"""Verdicts per second of our `bfcl` verifier and of BFCL's checker, on the same items, in one run.

    .venv/bin/python -m bench.verify --reference-python /work/bfcl-ref-venv/bin/python

Items are the agreement benchmark's perturbations of BFCL ground truth (all five categories).
Two measurements, each over the same items for both sides:
- `from_text`: the raw prompt-format output is decoded and checked (our parser and verifier;
  BFCL's `default_decode_ast_prompting` and `ast_checker`);
- `decoded`: calls already decoded, the checker alone (our `BfclVerifier.check`; `ast_checker`).
Times cover the scoring loop only, not start-up or loading. The machine is noisy, so the
sides alternate for a few rounds, the fastest round of each counts, and only the ratio
measured in the same run means anything. Without a reference interpreter it says so and
reports our figures alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.bfcl_agreement import CATEGORIES, DEFAULT_BFCL_DIR, Item, build_items, load_tasks, run_reference
from trainer.parsing import parse_tool_calls
from trainer.verifiers.bfcl import BfclVerifier


def time_ours_from_text(items: Sequence[Item]) -> float:
    verifier = BfclVerifier()
    tasks = [item.task for item in items]
    outputs = [item.output for item in items]
    started = time.perf_counter()
    verifier.verify(tasks, outputs)
    return time.perf_counter() - started


def time_ours_decoded(items: Sequence[Item]) -> float:
    verifier = BfclVerifier()
    decoded = [(item.task, parse_tool_calls(item.output).calls) for item in items]
    started = time.perf_counter()
    for task, calls in decoded:
        verifier.check(task, calls)
    return time.perf_counter() - started


def decoded_items(items: Sequence[Item]) -> list[Item]:
    """The same items with their calls decoded by BFCL's prompt decoder's equivalent."""
    return [
        Item(
            item.key,
            item.task,
            item.kind,
            "decoded",
            item.output,
            [{call.name: call.arguments} for call in parse_tool_calls(item.output).calls],
            item.expected_pass,
        )
        for item in items
    ]


def rates(count: int, ours_seconds: float, reference_seconds: float | None) -> dict[str, Any]:
    ours = count / ours_seconds
    row: dict[str, Any] = {"ours_per_second": round(ours)}
    if reference_seconds is not None:
        reference = count / reference_seconds
        row.update(reference_per_second=round(reference), ratio_ours_to_reference=round(ours / reference, 2))
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Speed of our bfcl verifier against BFCL's AST checker.")
    parser.add_argument("--reference-python", help="interpreter of a virtualenv with bfcl-eval installed")
    parser.add_argument("--bfcl-dir", type=Path, default=DEFAULT_BFCL_DIR)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the fastest of each side counts")
    parser.add_argument("--limit", type=int, default=None, help="tasks per category (default: all)")
    args = parser.parse_args(argv)

    items = build_items(load_tasks(args.bfcl_dir, CATEGORIES, args.limit), modes=("python",))
    # The reference reads decoded calls as JSON, which cannot carry tuples: those items are left out.
    decoded = [item for item in decoded_items(items) if _json_safe(item.reference_output)]
    reference = args.reference_python if args.reference_python and Path(args.reference_python).exists() else None
    timings: dict[str, list[float]] = {
        "ours_text": [],
        "ours_decoded": [],
        "reference_text": [],
        "reference_decoded": [],
    }
    for _ in range(args.rounds):
        if reference is not None:
            timings["reference_text"].append(run_reference(reference, args.bfcl_dir, items)[1]["seconds"])
            timings["reference_decoded"].append(run_reference(reference, args.bfcl_dir, decoded)[1]["seconds"])
        timings["ours_text"].append(time_ours_from_text(items))
        timings["ours_decoded"].append(time_ours_decoded(decoded))
    best = {name: min(values) if values else None for name, values in timings.items()}
    report: dict[str, Any] = {"items_from_text": len(items), "items_decoded": len(decoded), "rounds": args.rounds}
    if reference is None:
        report["reference"] = "absent: pass --reference-python (a virtualenv with `pip install --no-deps bfcl-eval`)"
    report["from_text"] = rates(len(items), best["ours_text"], best["reference_text"])
    report["decoded"] = rates(len(decoded), best["ours_decoded"], best["reference_decoded"])
    print(json.dumps(report, indent=2))
    return 0


def _json_safe(value: Any) -> bool:
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main())
