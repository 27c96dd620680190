"""The `eval` job end to end: `python -m trainer eval --spec run.json` on the tiny model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.tiny_model import REPO_ROOT, TINY_SPEC, tiny_model, write_spec
from trainer.adapters import save_adapter
from trainer.evaluate import run_eval
from trainer.jobs import EXIT_FAILED, EXIT_STOPPED, run_job
from trainer.spec.adapters import WEIGHTS_FILE

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
    assert report["recommendation"]["method"] in {"sft", "grpo", "none"}
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
