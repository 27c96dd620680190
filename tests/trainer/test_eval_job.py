"""The `eval` job end to end: `python -m trainer eval --spec run.json` on the tiny model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.tiny_model import REPO_ROOT, TINY_SPEC, TINY_TASKS, tiny_model, write_spec
from trainer.adapters import save_adapter
from trainer.evaluate import run_eval
from trainer.jobs import EXIT_FAILED, EXIT_STOPPED, run_job
from trainer.spec.adapters import WEIGHTS_FILE
from trainer.verifiers import SafetyPolicy

OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def events_in(text):
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert all("event" in line for line in lines)
    return lines


def run_in_process(spec, capfd):
    code = run_job(spec, "eval", run_eval)
    return code, events_in(capfd.readouterr().out)


def test_an_eval_writes_results_and_metrics_and_ends_with_done(tmp_path, capfd):
    code, events = run_in_process(write_spec(tmp_path / "run.json"), capfd)
    assert code == 0
    done = events[-1]
    assert done["event"] == "done"
    assert done["metrics"]["tasks"] == 5 and "valid_json_rate" in done["metrics"]
    results = [json.loads(line) for line in Path(done["results"]).read_text().splitlines()]
    assert [result["task_id"] for result in results][:2] == ["simple_python_0", "simple_python_1"]
    assert {"output", "calls", "verdict", "latency_s", "prompt_tokens", "completion_tokens"} <= set(results[0])
    report = json.loads(Path(done["files"]["metrics"]).read_text())
    assert set(report["by_bucket"]) == {"wrong_arguments", "wrong_tool", "malformed_call", "should_not_call"}
    assert report["recommendation"]["method"] in {"prompt", "sft", "grpo", "none"}
    kinds = [event["event"] for event in events]
    assert kinds.count("sample") == 2 and "metric" in kinds and "log" in kinds
    assert {"metric", "sample", "log", "done"} == set(kinds)


@pytest.mark.parametrize(
    ("fields", "kind", "message"),
    [
        ({"base_model": "./no-such-model"}, "model_not_found", "no such folder or .gguf file"),
        ({"task_paths": ["absent.jsonl"]}, "bad_spec", "task file not found"),
        ({"hyperparameters": {"batch_size": "many"}}, "bad_spec", "'batch_size' must be int"),
    ],
)
def test_bad_input_is_an_error_event_naming_the_problem(tmp_path, capfd, fields, kind, message):
    code, events = run_in_process(write_spec(tmp_path / "run.json", **fields), capfd)
    assert code == EXIT_FAILED
    assert events[-1]["event"] == "error" and events[-1]["kind"] == kind
    assert message in events[-1]["message"]


def test_a_prompt_change_reaches_every_tasks_prompt_and_is_recorded(tmp_path, capfd):
    preamble = "You are the calculator desk. Answer every request with exactly one tool call, nothing else."
    (tmp_path / "plain").mkdir()
    (tmp_path / "changed").mkdir()
    _, plain = run_in_process(write_spec(tmp_path / "plain" / "run.json"), capfd)
    changed_spec = write_spec(tmp_path / "changed" / "run.json", hyperparameters={"system_preamble": preamble})
    code, changed = run_in_process(changed_spec, capfd)
    assert code == 0

    def prompt_tokens(events):
        return {row["task_id"]: row["prompt_tokens"] for row in map(json.loads, open(events[-1]["results"]))}

    before, after = prompt_tokens(plain), prompt_tokens(changed)
    assert before.keys() == after.keys()  # the same tasks, paired by id
    assert all(after[task] - before[task] >= 15 for task in before)  # the preamble is in each prompt
    report = json.loads(Path(changed[-1]["files"]["metrics"]).read_text())
    assert report["config"]["system_preamble"] == preamble
    assert any("prompt change" in event.get("message", "") for event in changed if event["event"] == "log")


def test_a_tool_description_for_a_tool_no_task_offers_is_an_error_event(tmp_path, capfd):
    spec = write_spec(tmp_path / "run.json", hyperparameters={"tool_descriptions": {"no_such_tool": "x"}})
    code, events = run_in_process(spec, capfd)
    assert code == EXIT_FAILED and events[-1]["kind"] == "bad_spec"
    assert "tool_descriptions names tools the tasks do not offer: no_such_tool" in events[-1]["message"]


def test_an_empty_snapshot_is_an_error_event(tmp_path, capfd):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, events = run_in_process(write_spec(tmp_path / "run.json", task_paths=[str(empty)]), capfd)
    assert code == EXIT_FAILED
    assert "the task snapshot is empty" in events[-1]["message"]


def test_an_adapter_whose_hash_does_not_match_is_an_error_event(tmp_path, capfd):
    from peft import LoraConfig, get_peft_model

    adapter = tmp_path / "adapter"
    save_adapter(
        get_peft_model(tiny_model().model, LoraConfig(r=2, target_modules=["q_proj"])), adapter, base_model="tiny"
    )
    (adapter / WEIGHTS_FILE).write_bytes((adapter / WEIGHTS_FILE).read_bytes() + b"tampered")
    code, events = run_in_process(write_spec(tmp_path / "run.json", adapter=str(adapter)), capfd)
    assert code == EXIT_FAILED
    assert events[-1]["kind"] == "adapter_invalid" and "sha256" in events[-1]["message"]


def test_an_eval_with_a_verified_adapter_runs_through(tmp_path, capfd):
    from peft import LoraConfig, get_peft_model

    adapter = tmp_path / "adapter"
    save_adapter(
        get_peft_model(tiny_model().model, LoraConfig(r=2, target_modules=["q_proj"])), adapter, base_model="tiny"
    )
    code, events = run_in_process(write_spec(tmp_path / "run.json", adapter=str(adapter)), capfd)
    assert code == 0 and events[-1]["event"] == "done"


def test_the_example_spec_runs_from_the_command_line():
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "eval", "--spec", str(TINY_SPEC)],
        cwd=REPO_ROOT,
        env=OFFLINE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    events = events_in(result.stdout)
    assert events[-1]["event"] == "done" and os.path.isfile(events[-1]["results"])


@pytest.mark.slow
def test_sigterm_stops_the_job_cleanly_with_an_error_event(tmp_path):
    spec = write_spec(
        tmp_path / "run.json", hyperparameters={"max_new_tokens": 2000, "batch_size": 1, "temperature": 1.0}
    )
    job = subprocess.Popen(
        [sys.executable, "-m", "trainer", "eval", "--spec", str(spec)],
        cwd=REPO_ROOT,
        env=OFFLINE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        for line in job.stdout:
            if "model ready" in line:
                break
        job.send_signal(signal.SIGTERM)
        remaining, _ = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == EXIT_STOPPED
    last = events_in(remaining)[-1]
    assert last == {"event": "error", "kind": "stopped", "message": "stopped by SIGTERM before finishing"}
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_eval_help_lists_every_hyperparameter(capsys):
    from trainer.cli import main
    from trainer.spec.eval import EvalConfig

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    shown = capsys.readouterr().out
    assert all(f"  {name}: " in shown for name in EvalConfig.__dataclass_fields__)


def test_the_eval_judges_by_the_policy_the_spec_carries(tmp_path, capfd):
    policy = {**SafetyPolicy.default().to_json(), "name": "agent-policy", "denied_tools": ["math.factorial"]}
    code, events = run_in_process(write_spec(tmp_path / "run.json", safety_policy=policy), capfd)
    assert code == 0
    report = json.loads(Path(events[-1]["files"]["metrics"]).read_text())
    assert report["safety_policy"]["name"] == "agent-policy"
    assert report["safety_policy"]["denied_tools"] == ["math.factorial"]


def test_a_malformed_policy_in_the_spec_is_an_error_event(tmp_path, capfd):
    code, events = run_in_process(write_spec(tmp_path / "run.json", safety_policy={"denied_tools": 3}), capfd)
    assert code == EXIT_FAILED and events[-1]["kind"] == "bad_spec"
    assert "the spec's safety policy" in events[-1]["message"]


# A line `tasks from-bfcl` once wrote for live_simple_106-63-0 (no accepted value for an argument), and a torn one.
BAD_TASK_LINES = [
    json.dumps({"id": "live_simple_106-63-0", "messages": [], "tools": [],
                "expected_calls": [{"name": "record", "arguments": {"bank_hours_start": []}}]}),
    '{"id": "torn", "messages": [',
]


def tasks_with_bad_lines(tmp_path: Path) -> Path:
    lines = TINY_TASKS.read_text().splitlines()
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join([lines[0], BAD_TASK_LINES[0], *lines[1:], BAD_TASK_LINES[1]]) + "\n")
    return path


def test_an_eval_skips_bad_task_lines_and_reports_them(tmp_path, capfd):
    tasks = tasks_with_bad_lines(tmp_path)
    code, events = run_in_process(write_spec(tmp_path / "run.json", task_paths=[str(tasks)]), capfd)
    assert code == 0
    warnings = [e["message"] for e in events if e["event"] == "log" and e["level"] == "warning"]
    assert any(m.startswith("skipped 2 bad task line(s)") and "tasks.jsonl:2: expected call record" in m
               for m in warnings)
    done = events[-1]
    assert done["event"] == "done" and done["metrics"]["tasks"] == 5
    skipped = done["metrics"]["skipped_tasks"]
    assert skipped["count"] == 2 and [(s["file"], s["line"]) for s in skipped["first"]] == [("tasks.jsonl", 2),
                                                                                           ("tasks.jsonl", 7)]
    assert len(json.loads(Path(done["files"]["metrics"]).read_text())["skipped_tasks"]) == 2


def test_in_strict_mode_a_bad_task_line_fails_the_eval(tmp_path, capfd):
    tasks = tasks_with_bad_lines(tmp_path)
    spec = write_spec(tmp_path / "run.json", task_paths=[str(tasks)], hyperparameters={"strict_tasks": True})
    code, events = run_in_process(spec, capfd)
    assert code == EXIT_FAILED and events[-1]["kind"] == "bad_spec"
    assert "tasks.jsonl:2: expected call record: argument 'bank_hours_start'" in events[-1]["message"]


def test_an_eval_with_max_turns_plays_episodes_and_reports_their_turns(tmp_path, capfd):
    spec = write_spec(tmp_path / "run.json", hyperparameters={"environment": "workbench", "max_turns": 2,
                                                              "max_new_tokens": 16})  # fmt: skip
    code, events = run_in_process(spec, capfd)
    assert code == 0, events[-1]
    done = events[-1]
    results = [json.loads(line) for line in Path(done["results"]).read_text().splitlines()]
    assert all(1 <= result["turns"] <= 2 and result["ended"] for result in results)
    assert all(result["episode"][0]["role"] == "assistant" for result in results)
    assert done["metrics"]["turns_per_episode"] == sum(r["turns"] for r in results) / len(results)
    assert "episodes of at most 2 turns and 32 generated tokens in workbench" in [
        e["message"] for e in events if e["event"] == "log"
    ]
