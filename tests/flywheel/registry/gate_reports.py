"""Gate reports made the way `trainer.gate` makes them, from constructed per-task outcomes."""

from __future__ import annotations

from pathlib import Path

from tests.flywheel.registry.conftest import write_gate_file
from trainer.gate import HELDOUT, REGRESSION, decide, model_report, task_flips
from trainer.spec.gate import Policy


def task_result(task_id: str, correct: bool, bucket: str = "wrong_tool", unsafe: bool = False) -> dict:
    return {"task_id": task_id, "bucket": bucket, "source": "test", "output": "", "calls": [], "parse_error": None,
            "valid_json": True, "correct_tool": correct, "correct_arguments": correct, "execution_success": None,
            "unsafe_action": unsafe, "violations": [], "verifier_pass": correct, "reward": float(correct),
            "verdict": {}, "latency_s": 0.2, "prompt_tokens": 50, "completion_tokens": 10, "finished": True,
            "cost": 0.0}  # fmt: skip


def outcomes(passed: list[bool], buckets: tuple[str, ...] = ("wrong_tool", "wrong_arguments")) -> list[dict]:
    return [task_result(f"t{index}", ok, buckets[index % len(buckets)]) for index, ok in enumerate(passed)]


WINNING = ([index < 30 for index in range(40)], [index < 10 for index in range(40)])
NOISE = ([index < 21 for index in range(40)], [index < 20 for index in range(40)])


def gate_files(folder: Path, candidate_passed: list[bool], baseline_passed: list[bool]) -> dict[str, str]:
    """gate.json for a candidate and a baseline with these held-out outcomes (no regression tasks)."""
    candidate = {HELDOUT: outcomes(candidate_passed), REGRESSION: []}
    baseline = {HELDOUT: outcomes(baseline_passed), REGRESSION: []}
    decision = decide(candidate[HELDOUT], baseline[HELDOUT], [], [], Policy(bootstrap_resamples=200))
    report = {"candidate": model_report(candidate, 200, 0), "baseline": model_report(baseline, 200, 0),
              "tasks": task_flips(candidate, baseline, "correct_arguments"), "snapshot_sha256": "abc"}  # fmt: skip
    return write_gate_file(folder, decision.to_json(), report)
