"""How well the demo model, as an LLM judge, agrees with tau-bench's recorded outcomes.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python -m bench.judge_agreement --out /tmp/judge-bench

The items are tau-bench's 200 real GPT-4o airline trajectories (`shared/external/tau_bench`):
116 failed (reward 0) and 84 succeeded (reward 1). The reference label of each is that reward,
which tau-bench computed against human-annotated expected actions and outputs; the shared data
holds no reviewer bucket labels, so this is the closest thing to a reviewer's pass/fail. The 100
judged are 50 failures and 50 successes drawn with `random.Random(seed)` (seed 0 by default):
balanced, so that "always fail" or "always pass" scores 50% and a kappa near 0, not a flattering 58%.

The whole trajectory (each turn cut to 600 characters, the whole to `--max-chars`, 3000 by default: the
start and the end of the conversation, as one CPU thread can judge 100 in reasonable time) goes to
`python -m trainer judge` (the same job the app runs) with the default rubric, greedily; the
script prints the agreement rate with its 95% Wilson interval, Cohen's kappa, the confusion counts
and the unreadable replies, and writes them to `<out>/agreement.json`. A run takes about 10-30
minutes on one CPU thread.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainer.verifiers.judge import DEFAULT_RUBRIC, JudgeAgreement, judge_agreement

REPO_ROOT = Path(__file__).resolve().parent.parent
TAU_BENCH = REPO_ROOT.parent / "shared" / "external" / "tau_bench" / "gpt-4o-airline.json"
DEFAULT_THRESHOLD = 0.8
MIN_LABELS = 50


def sample(records: list[dict[str, Any]], per_label: int, seed: int) -> list[dict[str, Any]]:
    """`per_label` failures and `per_label` successes, drawn with the seed, in the file's order."""
    rng = random.Random(seed)
    chosen: set[int] = set()
    for passed in (False, True):
        indices = [i for i, record in enumerate(records) if (float(record["reward"]) == 1.0) is passed]
        chosen.update(rng.sample(indices, per_label))
    return [records[i] for i in sorted(chosen)]


def item_id(record: dict[str, Any]) -> str:
    return f"task{record['task_id']}-trial{record['trial']}"


def write_job(records: list[dict[str, Any]], out: Path, args: argparse.Namespace) -> Path:
    items = [{"id": item_id(record), "messages": record["traj"], "answer": None} for record in records]
    (out / "items.jsonl").write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items))
    hyperparameters = {
        "device": "cpu",
        "batch_size": args.batch_size,
        "max_transcript_chars": args.max_chars,
        "max_new_tokens": args.max_new_tokens,
        "rubric": DEFAULT_RUBRIC.to_json(),
    }
    spec = {
        "kind": "judge",
        "base_model": args.base_model,
        "task_paths": ["items.jsonl"],
        "output_dir": "job",
        "hyperparameters": hyperparameters,
    }
    (out / "run.json").write_text(json.dumps(spec, indent=1))
    return out / "run.json"


def run_judge(spec: Path) -> dict[str, Any]:
    """The done event of `python -m trainer judge`; progress goes to stderr as it comes."""
    command = [sys.executable, "-m", "trainer", "judge", "--spec", str(spec)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    )
    last: dict[str, Any] = {}
    assert process.stdout is not None
    for line in process.stdout:
        last = json.loads(line)
        if last["event"] in ("metric", "log"):
            print(f"  {last.get('message') or last['name'] + '=' + str(last['value'])}", file=sys.stderr, flush=True)
    process.wait()
    if last.get("event") != "done":
        raise SystemExit(f"the judge job failed: {last}")
    return last


def report(agreement: JudgeAgreement, threshold: float) -> str:
    rate = agreement.rate
    assert rate is not None
    approved = agreement.n >= MIN_LABELS and rate.value >= threshold
    kappa = "undefined" if agreement.kappa is None else f"{agreement.kappa:.3f}"
    return "\n".join([
        f"items judged: {agreement.n} (unreadable replies: {agreement.unreadable})",
        f"agreement: {rate.value:.1%} [{rate.low:.1%}, {rate.high:.1%}] (95% Wilson), {agreement.agreed}/{agreement.n}",
        f"Cohen's kappa (scored items): {kappa}",
        "confusion (judge/label): "
        f"pass/pass {agreement.pass_pass}, pass/fail {agreement.pass_fail}, "
        f"fail/pass {agreement.fail_pass}, fail/fail {agreement.fail_fail}",
        f"as a training reward at threshold {threshold:.0%} on >= {MIN_LABELS} labels: "
        f"{'approved' if approved else 'refused'}",
    ])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for the items, the job's output and the figures"
    )
    parser.add_argument("--base-model", default="demo", help="the judge model (default: the demo model)")
    parser.add_argument("--per-label", type=int, default=50, help="failures and successes each (default 50)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-chars", type=int, default=3000, help="longest transcript shown to the judge")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="longest reply of the judge")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = sample(json.loads(TAU_BENCH.read_text()), args.per_label, args.seed)
    labels = {item_id(record): float(record["reward"]) == 1.0 for record in records}
    done = run_judge(write_job(records, args.out, args))
    judgements = [json.loads(line) for line in Path(done["results"]).read_text().splitlines() if line.strip()]
    agreement = judge_agreement([(line["passed"], labels[line["id"]]) for line in judgements])
    text = report(agreement, args.threshold)
    print(text)
    figures = {"items": sorted(labels), "seed": args.seed, "agreement": agreement.to_json(), "job": done["metrics"]}
    (args.out / "agreement.json").write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
