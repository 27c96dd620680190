"""Summarise the CPU learning run's stages as Markdown tables (the numbers behind var/learning/RESULTS.md).

Reads, under var/learning/runs/: each eval stage's `metrics.json` (held-out metrics with their
95% intervals, as the eval job reports them) and `results.jsonl` (per task, for paired
differences between stages over the same tasks), each training stage's `<name>.events.jsonl`
(train curve, held-out evaluations during training, flags, the done event) and `stages.log`
(wall time per stage, written by run_stage.sh). Prints Markdown on stdout; writes nothing.

Run from the repository root: python -m trainer.examples.learning.report [--runs var/learning/runs]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.spec.stats import paired_difference_interval

REPO = Path(__file__).resolve().parents[3]
DATASETS = ("bfcl", "workbench", "workbench-multi")
EVAL_STAGES = (
    ("base", "baseline"),
    ("SFT", "sft-eval"),
    ("GRPO step 4 checkpoint", "grpo-ckpt4-eval"),
    ("GRPO", "grpo-eval"),
    ("GRPO on unsolved train prompts, 8 generations", "grpo-unsolved-eval"),
    ("GRPO on mined train tasks", "grpo-mined-eval"),
)
TRAINING_STAGES = ("sft", "grpo", "grpo-unsolved", "grpo-mined")
RATES = ("valid_json", "correct_tool", "correct_arguments", "execution_success", "unsafe_action", "verifier_pass")
PAIRED = ("valid_json", "correct_tool", "correct_arguments", "execution_success", "verifier_pass", "reward")


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("{")]


def interval(entry: Any, percent: bool = True) -> str:
    if not isinstance(entry, Mapping) or entry.get("value") is None:
        return "n/a"
    scale, unit, digits = (100.0, "%", 1) if percent else (1.0, "", 3)
    value, low, high = (float(entry[key]) * scale for key in ("value", "low", "high"))
    return f"{value:.{digits}f}{unit} [{low:.{digits}f}, {high:.{digits}f}]"


def eval_table(runs: Path, dataset: str) -> list[str]:
    header = ["stage", "tasks", *RATES, "mean reward", "completion tokens/task", "answers that ended",
              "turns/episode", "calls/episode"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, suffix in EVAL_STAGES:
        metrics_path = runs / f"{dataset}-{suffix}" / "metrics.json"
        if not metrics_path.is_file():
            continue
        overall = json.loads(metrics_path.read_text(encoding="utf-8"))["overall"]
        results = per_task(runs, dataset, suffix)
        ended = sum(1 for row in results.values() if row.get("finished")) if results else 0
        cells = [
            label,
            str(overall.get("tasks", len(results))),
            *(interval(overall.get(f"{name}_rate")) for name in RATES),
            interval(overall.get("mean_reward"), percent=False),
            f"{overall.get('completion_tokens_per_task', 0):.1f}",
            f"{ended}/{len(results)}",
            *(f"{overall[name]:.2f}" if name in overall else "n/a"
              for name in ("turns_per_episode", "calls_per_episode")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def per_task(runs: Path, dataset: str, suffix: str) -> dict[str, dict[str, Any]]:
    path = runs / f"{dataset}-{suffix}" / "results.jsonl"
    return read_results(path) if path.is_file() else {}


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """An eval job's `results.jsonl`, by task id."""
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {row["task_id"]: row for row in rows}


def paired_table(runs: Path, dataset: str) -> list[str]:
    lines = ["| comparison | " + " | ".join(PAIRED) + " |", "|" + "---|" * (len(PAIRED) + 1)]
    pairs = (("SFT - base", "sft-eval", "baseline"), ("GRPO - SFT", "grpo-eval", "sft-eval"),
             ("GRPO - base", "grpo-eval", "baseline"),
             ("GRPO on unsolved - SFT", "grpo-unsolved-eval", "sft-eval"),
             ("GRPO on mined - SFT", "grpo-mined-eval", "sft-eval"))  # fmt: skip
    for label, after_name, before_name in pairs:
        after, before = per_task(runs, dataset, after_name), per_task(runs, dataset, before_name)
        ids = sorted(set(after) & set(before))
        if not ids:
            continue
        cells = [label]
        for name in PAIRED:
            if any(after[i].get(name) is None or before[i].get(name) is None for i in ids):
                cells.append("n/a")
                continue
            diff = paired_difference_interval(
                [float(after[i][name]) for i in ids], [float(before[i][name]) for i in ids], resamples=1000, seed=0
            )
            scale, digits = (1.0, 3) if name == "reward" else (100.0, 1)
            cells.append(
                f"{diff.value * scale:+.{digits}f} [{diff.low * scale:+.{digits}f}, {diff.high * scale:+.{digits}f}]"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def metric_series(events: Sequence[Mapping[str, Any]], name: str) -> list[tuple[int, float]]:
    return [(int(e["step"]), float(e["value"])) for e in events if e.get("event") == "metric" and e["name"] == name]


def window_mean(series: Sequence[tuple[int, float]], first: bool, size: int) -> str:
    values = [value for _step, value in (series[:size] if first else series[-size:])]
    return f"{statistics.fmean(values):.3f}" if values else "n/a"


def run_events(runs: Path, name: str) -> list[dict[str, Any]]:
    """A training stage's events; an interrupted stage's `<name>.part<n>.events.jsonl` come first, and a step's
    metric from the resumed attempt replaces the one the interrupted attempt logged for the same step."""
    files = [*sorted(runs.glob(f"{name}.part*.events.jsonl")), runs / f"{name}.events.jsonl"]
    metrics: dict[tuple[int, str], dict[str, Any]] = {}
    others: list[dict[str, Any]] = []
    for path in files:
        for event in read_events(path):
            if event.get("event") == "metric":
                metrics[(int(event["step"]), str(event["name"]))] = event
            else:
                others.append(event)
    return [*(metrics[key] for key in sorted(metrics)), *others]


def training_summary(runs: Path, name: str) -> list[str]:
    events = run_events(runs, name)
    if not events:
        return []
    lines = [f"**{name}**", ""]
    size = 5
    for metric in (
        "loss",
        "token_accuracy",
        "reward/mean",
        "reward/std",
        "tied_group_fraction",
        "completion_length",
        "grad_norm",
    ):
        series = metric_series(events, metric)
        if series:
            lines.append(
                f"- {metric}: first {size} steps {window_mean(series, True, size)}, last {size} steps "
                f"{window_mean(series, False, size)} (steps {series[0][0]}-{series[-1][0]})"
            )
    rewards = metric_series(events, "reward/mean")
    if len(rewards) > 1:
        half = len(rewards) // 2
        lines.append(
            f"- reward/mean by half: first {half} steps "
            f"{statistics.fmean(v for _s, v in rewards[:half]):.3f}, last {len(rewards) - half} steps "
            f"{statistics.fmean(v for _s, v in rewards[half:]):.3f}"
        )
    if rewards:
        lines.append("- reward/mean per step: " + ", ".join(f"{v:.2f}" for _s, v in rewards))
    tied = metric_series(events, "tied_group_fraction")
    if tied:
        lines.append(f"- tied groups (all rewards equal): {sum(1 for _s, v in tied if v >= 1.0)} of {len(tied)} steps")
    heldout = sorted({int(e["step"]) for e in events if e.get("event") == "metric"
                      and str(e["name"]).startswith("heldout/")})  # fmt: skip
    for step in heldout:
        values = {
            str(e["name"]).removeprefix("heldout/"): float(e["value"])
            for e in events
            if e.get("event") == "metric" and e["step"] == step and str(e["name"]).startswith("heldout/")
        }
        lines.append(f"- held-out sample at step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in values.items()))
    for event in events:
        if event.get("event") == "log" and (
            str(event.get("message", "")).startswith("flag:") or event.get("level") == "warning"
        ):
            lines.append(f"- {event.get('level')}: {event['message']}")
        if event.get("event") in ("done", "error"):
            shown = {key: value for key, value in event.items() if key != "event"}
            lines.append(f"- {event['event']}: `{json.dumps(shown)}`")
    return [*lines, ""]


def stage_times(runs: Path) -> list[str]:
    path = runs / "stages.log"
    lines = [
        "| stage | torch threads | start (UTC) | end (UTC) | wall time | CPU time (user+sys) | max RSS | exit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if path.is_file():
        for row in path.read_text(encoding="utf-8").splitlines():
            name, threads, start, end, seconds, code = row.split()
            cpu, rss = time_file(runs / f"{name}.time")
            lines.append(
                f"| {name} | {threads.removeprefix('threads=')} | {start} | {end} | "
                f"{seconds} s ({int(seconds) / 60:.1f} min) | {cpu} | {rss} | {code} |"
            )
    return lines


def time_file(path: Path) -> tuple[str, str]:
    """(CPU seconds, peak memory) from `/usr/bin/time -v` output."""
    if not path.is_file():
        return "n/a", "n/a"
    fields = dict(
        line.strip().rsplit(": ", 1) for line in path.read_text(encoding="utf-8").splitlines() if ": " in line
    )
    cpu = float(fields.get("User time (seconds)", 0)) + float(fields.get("System time (seconds)", 0))
    rss = int(fields.get("Maximum resident set size (kbytes)", 0)) / 1024 / 1024
    return f"{cpu:.0f} s", f"{rss:.1f} GiB"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=REPO / "var" / "learning" / "runs")
    args = parser.parse_args(argv)
    out: list[str] = []
    for dataset in DATASETS:
        out += [f"## {dataset}: held-out metrics (rates: Wilson 95% intervals; mean reward: bootstrap)", "",
                *eval_table(args.runs, dataset), ""]
        out += [
            f"### {dataset}: paired differences over the same held-out tasks (points; reward in its units)",
            "",
            *paired_table(args.runs, dataset),
            "",
        ]
        out += [f"### {dataset}: training", ""]
        for stage in TRAINING_STAGES:
            out += training_summary(args.runs, f"{dataset}-{stage}")
    out += ["## Wall time per stage", "", *stage_times(args.runs), ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
