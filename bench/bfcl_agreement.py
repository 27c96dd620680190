"""How often our `bfcl` verifier agrees with BFCL's own AST checker, and where it does not.

    .venv/bin/python -m bench.bfcl_agreement --reference-python /work/bfcl-ref-venv/bin/python

It imports the BFCL tasks (simple_python, multiple, parallel, parallel_multiple and
irrelevance) with `trainer.spec.bfcl`, builds systematic perturbations of the ground truth
(`bench.bfcl_perturbations`), renders each as a model would emit it (BFCL's Python-call
prompt format, and OpenAI tool_calls JSON), scores every item with our verifier from the
raw output and with BFCL's checker in its own interpreter (`bench/bfcl_reference.py`), and
prints the agreement overall, per category and per perturbation, with the disagreements
grouped by class. It also counts our verdicts that contradict a perturbation's known label.
Without a reference interpreter it says so and reports our verdicts alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.bfcl_perturbations import (
    FORMATS,
    Variant,
    answer_calls,
    as_bfcl_decoded,
    as_openai,
    as_python,
    variants,
)
from trainer.contracts import Task, ToolCall, Verdict
from trainer.spec.bfcl import load_bfcl_tasks
from trainer.verifiers.bfcl import BfclVerifier

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BFCL_DIR = REPO_ROOT.parent / "shared" / "external" / "bfcl"
REFERENCE_RUNNER = Path(__file__).resolve().parent / "bfcl_reference.py"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
MODES = ("python", "openai")


@dataclass(frozen=True)
class Item:
    """One output scored by both checkers: ours reads `output`, BFCL's reads `reference_output`."""

    key: str
    task: Task
    kind: str
    mode: str
    output: Any
    reference_output: Any
    expected_pass: bool | None

    @property
    def category(self) -> str:
        return self.task.id.rsplit("_", 1)[0]

    def reference_json(self) -> dict[str, Any]:
        mode = "python" if self.mode == "python" else "decoded"
        return {"key": self.key, "task_id": self.task.id, "mode": mode, "output": self.reference_output}


def load_tasks(bfcl_dir: Path, categories: Sequence[str], limit: int | None = None) -> list[Task]:
    tasks: list[Task] = []
    for category in categories:
        answers = bfcl_dir / "possible_answer" / f"BFCL_v4_{category}.json"
        loaded = load_bfcl_tasks(bfcl_dir / f"BFCL_v4_{category}.json", answers if answers.exists() else None)
        tasks.extend(loaded[:limit])
    return tasks


def build_items(tasks: Sequence[Task], modes: Sequence[str] = MODES, seed: int = 0) -> list[Item]:
    """Every perturbation of every task, rendered in every mode."""
    items = []
    for task in tasks:
        task_variants = _irrelevance_variants(task) if task.no_call_expected else variants(task, seed)
        for number, variant in enumerate(task_variants):
            for mode in modes:
                python_text = as_python(variant.calls) if variant.calls or mode == "python" else "[]"
                output = python_text if mode == "python" else as_openai(variant.calls)
                reference = python_text if mode == "python" else as_bfcl_decoded(variant.calls)
                key = f"{task.id}|{number}:{variant.kind}|{mode}"
                items.append(Item(key, task, variant.kind, mode, output, reference, variant.expected_pass))
    return items


def build_format_items(tasks: Sequence[Task]) -> list[Item]:
    """The correct answer of every task written in each of the formats real models use."""
    items = []
    for task in tasks:
        if task.no_call_expected:
            continue
        calls = answer_calls(task)
        for name, render in FORMATS.items():
            text = render(calls)
            items.append(Item(f"{task.id}|format:{name}|python", task, f"format:{name}", "python", text, text, None))
    return items


def _irrelevance_variants(task: Task) -> list[Variant]:
    tool = task.tools[0]["function"]
    properties = (tool.get("parameters") or {}).get("properties") or {}
    arguments = {name: "x" for name in list(properties)[:2]}
    return [
        Variant(task.id, "abstained", [], True),
        Variant(task.id, "called_anyway", [ToolCall(tool["name"], arguments)], False),
    ]


def run_reference(
    reference_python: str, bfcl_dir: Path, items: Sequence[Item], repeat: int = 1
) -> tuple[dict[str, dict], dict]:
    """BFCL's verdict per item key, and its timing, from the reference interpreter."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as handle:
        for item in items:
            handle.write(json.dumps(item.reference_json()) + "\n")
        path = handle.name
    command = [
        reference_python,
        str(REFERENCE_RUNNER),
        "--bfcl-dir",
        str(bfcl_dir),
        "--items",
        path,
        "--repeat",
        str(repeat),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    Path(path).unlink(missing_ok=True)
    if completed.returncode != 0:
        raise RuntimeError(f"the reference checker failed:\n{completed.stderr[-3000:]}")
    verdicts, timing = {}, {}
    for line in completed.stdout.splitlines():
        row = json.loads(line)
        if "timing" in row:
            timing = row["timing"]
        else:
            verdicts[row["key"]] = row
    return verdicts, timing


def score_ours(items: Sequence[Item]) -> list[Verdict]:
    return BfclVerifier().verify([item.task for item in items], [item.output for item in items])


def compare(items: Sequence[Item], ours: Sequence[Verdict], reference: dict[str, dict]) -> dict[str, Any]:
    """Agreement overall, per category and per perturbation, and disagreements by class."""
    by_category: dict[str, Counter] = {}
    by_kind: dict[str, Counter] = {}
    classes: Counter = Counter()
    examples: dict[str, str] = {}
    for item, verdict in zip(items, ours, strict=True):
        theirs = reference[item.key]
        agree = verdict.passed == theirs["valid"]
        for table, name in ((by_category, item.category), (by_kind, item.kind)):
            table.setdefault(name, Counter())["agree" if agree else "disagree"] += 1
        if not agree:
            label = (
                f"{item.kind}/{item.mode}: ours={'pass' if verdict.passed else 'fail'}, "
                f"bfcl={'pass' if theirs['valid'] else 'fail'} ({theirs['error_type']})"
            )
            classes[label] += 1
            examples.setdefault(label, f"{item.key}: {verdict.reason}")
    agreed = sum(counter["agree"] for counter in by_category.values())
    return {
        "items": len(items),
        "agreement": agreed / len(items) if items else 1.0,
        "by_category": {name: _rate(counter) for name, counter in sorted(by_category.items())},
        "by_perturbation": {name: _rate(counter) for name, counter in sorted(by_kind.items())},
        "disagreement_classes": [
            {"class": label, "count": count, "example": examples[label]} for label, count in classes.most_common()
        ],
    }


def label_contradictions(items: Sequence[Item], ours: Sequence[Verdict]) -> list[str]:
    """Items whose known BFCL verdict (from how they were built) our verifier contradicts.

    Labels assume the unperturbed answer passes, so tasks whose answer fails are left out.
    """
    failing = {
        item.task.id
        for item, verdict in zip(items, ours, strict=True)
        if item.kind == "ground_truth" and not verdict.passed
    }
    return [
        f"{item.key}: expected {'pass' if item.expected_pass else 'fail'}, got: {verdict.reason}"
        for item, verdict in zip(items, ours, strict=True)
        if item.expected_pass is not None and item.task.id not in failing and item.expected_pass != verdict.passed
    ]


def _rate(counter: Counter) -> dict[str, Any]:
    total = counter["agree"] + counter["disagree"]
    return {"items": total, "agreement": round(counter["agree"] / total, 5) if total else 1.0}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Agreement of our bfcl verifier with BFCL's AST checker.")
    parser.add_argument("--reference-python", help="interpreter of a virtualenv with bfcl-eval installed")
    parser.add_argument("--bfcl-dir", type=Path, default=DEFAULT_BFCL_DIR)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="tasks per category (default: all)")
    parser.add_argument("--min-agreement", type=float, default=0.99)
    args = parser.parse_args(argv)

    tasks = load_tasks(args.bfcl_dir, CATEGORIES, args.limit)
    items = build_items(tasks, seed=args.seed)
    format_items = build_format_items(tasks)
    ours = score_ours(items)
    ours_formats = score_ours(format_items)
    contradictions = label_contradictions(items, ours)
    report: dict[str, Any] = {
        "items": len(items),
        "ours_passed": sum(v.passed for v in ours),
        "label_contradictions": len(contradictions),
        "label_contradiction_examples": contradictions[:5],
    }
    if not args.reference_python or not Path(args.reference_python).exists():
        report["reference"] = "absent: pass --reference-python (a virtualenv with `pip install --no-deps bfcl-eval`)"
        report["formats_ours_passed"] = {
            name: sum(v.passed for i, v in zip(format_items, ours_formats, strict=True) if i.kind == f"format:{name}")
            for name in FORMATS
        }
        print(json.dumps(report, indent=2))
        return 2
    reference, _ = run_reference(args.reference_python, args.bfcl_dir, [*items, *format_items])
    report.update(compare(items, ours, reference))
    report["formats"] = compare(format_items, ours_formats, reference)
    print(json.dumps(report, indent=2))
    return 0 if report["agreement"] >= args.min_agreement and not contradictions else 1


if __name__ == "__main__":
    sys.exit(main())
