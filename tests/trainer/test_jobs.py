from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tests.trainer.tiny_model import REPO_ROOT
from trainer.contracts import (
    PARENT_PID_ENV,
    CheckpointEvent,
    ContractError,
    DoneEvent,
    ErrorEvent,
    LogEvent,
    MetricEvent,
    RunSpec,
    SampleEvent,
    event_from_json,
)
from trainer.jobs import EXIT_FAILED, EXIT_STOPPED, JobStopped, StopFlag, load_spec, run_job, stop_on_sigterm
from trainer.spec.config import JobError, SpecError, config_from_json


def spec_file(tmp_path, **overrides):
    data = {"kind": "eval", "base_model": "demo", "task_paths": ["tasks.jsonl"], "output_dir": "out", **overrides}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    return path


def events_in(text):
    return [json.loads(line) for line in text.splitlines()]


def test_relative_paths_in_a_spec_are_resolved_against_its_folder(tmp_path):
    spec = load_spec(spec_file(tmp_path, adapter="adapters/a1"), "eval")
    assert spec.task_paths == [str(tmp_path / "tasks.jsonl")]
    assert spec.output_dir == str(tmp_path / "out")
    assert spec.adapter == str(tmp_path / "adapters" / "a1")
    assert spec.base_model == "demo"


def test_a_relative_model_path_is_resolved_but_a_hub_id_is_not(tmp_path):
    assert load_spec(spec_file(tmp_path, base_model="./models/m"), "eval").base_model == str(tmp_path / "models/m")
    assert load_spec(spec_file(tmp_path, base_model="org/name"), "eval").base_model == "org/name"


def test_a_spec_for_another_kind_is_refused(tmp_path):
    with pytest.raises(SpecError, match="'sft' job, not 'eval'"):
        load_spec(spec_file(tmp_path, kind="sft"), "eval")


def test_a_missing_or_broken_spec_names_the_problem(tmp_path):
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "absent.json", "eval")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(broken, "eval")
    with pytest.raises(SpecError, match="missing 'output_dir'"):
        load_spec(_without(tmp_path, "output_dir"), "eval")


def _without(tmp_path, key):
    path = spec_file(tmp_path)
    data = json.loads(path.read_text())
    del data[key]
    path.write_text(json.dumps(data))
    return path


def test_a_run_spec_round_trips_through_json():
    spec = RunSpec(
        kind="eval",
        base_model="demo",
        task_paths=["a.jsonl"],
        output_dir="o",
        adapter="x",
        seed=3,
        hyperparameters={"batch_size": 2},
    )
    assert RunSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    with pytest.raises(ContractError, match="unknown kind"):
        RunSpec.from_json({**spec.to_json(), "kind": "train"})


@pytest.mark.parametrize(
    "event",
    [
        MetricEvent(step=1, name="valid_json_rate", value=0.5),
        SampleEvent(step=0, task_id="t1", prompt="p", completion="c", reward=1.0, components={"tool": 0.4}),
        CheckpointEvent(step=10, path="/tmp/ckpt"),
        LogEvent(message="hello"),
        DoneEvent(metrics={"tasks": 1}, results="/tmp/results.jsonl", files={"metrics": "/tmp/m.json"}),
        ErrorEvent(message="boom", kind="bad_spec"),
    ],
)
def test_every_event_round_trips_through_its_protocol_line(event):
    line = json.loads(json.dumps(event.to_json()))
    assert "event" in line
    assert event_from_json(line) == event


def test_an_unknown_event_is_a_contract_error():
    with pytest.raises(ContractError, match="unknown event"):
        event_from_json({"event": "party"})


@dataclass(frozen=True)
class ExampleConfig:
    rate: float = field(default=0.1, metadata={"help": "a rate"})
    name: str = "x"
    size: int | None = None


def test_a_config_is_read_with_types_checked():
    config = config_from_json(ExampleConfig, {"rate": 1, "size": None, "name": "y"}, "example")
    assert config == ExampleConfig(rate=1.0, name="y", size=None)
    assert isinstance(config.rate, float)


def test_a_config_refuses_unknown_fields_and_wrong_types():
    with pytest.raises(SpecError, match="unknown field.*colour.*known: name, rate, size"):
        config_from_json(ExampleConfig, {"colour": "red"}, "example")
    with pytest.raises(SpecError, match="'size' must be int or null"):
        config_from_json(ExampleConfig, {"size": "big"}, "example")
    with pytest.raises(SpecError, match="'rate' must be float"):
        config_from_json(ExampleConfig, {"rate": True}, "example")


def test_a_finished_job_ends_with_its_done_event_and_exit_zero(tmp_path, capfd):
    def body(spec, events, stop):
        events.emit(LogEvent("working"))
        print("a library printing to stdout")
        return DoneEvent(metrics={"tasks": len(spec.task_paths)})

    assert run_job(spec_file(tmp_path), "eval", body) == 0
    captured = capfd.readouterr()
    assert [event["event"] for event in events_in(captured.out)] == ["log", "done"]
    assert "a library printing to stdout" in captured.err


def test_a_failing_job_ends_with_an_error_event_and_a_nonzero_exit(tmp_path, capfd):
    class ModelMissing(JobError):
        kind = "model_not_found"

    def body(spec, events, stop):
        raise ModelMissing("no such model: m")

    assert run_job(spec_file(tmp_path), "eval", body) == EXIT_FAILED
    assert events_in(capfd.readouterr().out) == [
        {"event": "error", "kind": "model_not_found", "message": "no such model: m"}
    ]


def test_a_crash_is_reported_as_an_internal_error_with_the_traceback_on_stderr(tmp_path, capfd):
    def body(spec, events, stop):
        raise RuntimeError("unexpected")

    assert run_job(spec_file(tmp_path), "eval", body) == EXIT_FAILED
    captured = capfd.readouterr()
    assert events_in(captured.out)[-1] == {"event": "error", "kind": "internal", "message": "RuntimeError: unexpected"}
    assert "Traceback" in captured.err


def test_a_bad_spec_is_an_error_event_before_the_body_runs(tmp_path, capfd):
    ran = []
    assert run_job(tmp_path / "absent.json", "eval", lambda *args: ran.append(1)) == EXIT_FAILED
    assert events_in(capfd.readouterr().out)[0]["kind"] == "bad_spec"
    assert not ran


def test_sigterm_sets_the_stop_flag_instead_of_killing():
    flag = StopFlag()
    previous = signal.getsignal(signal.SIGTERM)
    with stop_on_sigterm(flag):
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.requested
        with pytest.raises(JobStopped):
            flag.raise_if_requested()
    assert signal.getsignal(signal.SIGTERM) == previous


def test_a_stopped_job_reports_it_and_exits_143(tmp_path, capfd):
    def body(spec, events, stop):
        os.kill(os.getpid(), signal.SIGTERM)
        stop.raise_if_requested()
        return DoneEvent(metrics={})

    assert run_job(spec_file(tmp_path), "eval", body) == EXIT_STOPPED == 143
    assert events_in(capfd.readouterr().out)[-1]["kind"] == "stopped"


def test_stdout_is_restored_after_a_job(tmp_path, capfd):
    run_job(spec_file(tmp_path), "eval", lambda *args: DoneEvent(metrics={}))
    print("after the job")
    sys.stdout.flush()
    assert "after the job" in capfd.readouterr().out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_job_process_asks_to_die_with_its_parent():
    code = (
        "import ctypes; from trainer.jobs import die_with_parent; die_with_parent(); "
        "signal = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(signal), 0, 0, 0); print(signal.value)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == str(int(signal.SIGTERM))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_job_whose_parent_died_before_it_asked_stops_at_once():
    code = "from trainer.jobs import die_with_parent; die_with_parent(); print('still running')"
    env = {**os.environ, PARENT_PID_ENV: "1"}  # not this child's parent: the worker is gone
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                            env=env)  # fmt: skip
    assert result.returncode == 1 and "still running" not in result.stdout
    assert "is gone; stopping" in result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_job_started_by_its_named_parent_runs_on():
    code = "from trainer.jobs import die_with_parent; die_with_parent(); print('still running')"
    env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                            env=env, check=True)  # fmt: skip
    assert result.stdout.strip() == "still running"
