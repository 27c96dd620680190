"""The gate on vLLM: candidate and baseline are one engine (the baseline without the adapter), in turns."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.trainer.tiny_model import TINY_TASKS
from tests.vllm.conftest import REPO_ROOT, VLLM_ENV, VLLM_PYTHON

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_a_gate_on_vllm_runs_both_models_on_one_engine_in_turns(vllm_model, tmp_path):
    model_dir, adapter_dir = vllm_model
    regression = tmp_path / "regression.jsonl"
    regression.write_text("".join(TINY_TASKS.read_text().splitlines(keepends=True)[:2]))
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps({
        "kind": "gate", "base_model": str(model_dir), "adapter": str(adapter_dir), "task_paths": [str(TINY_TASKS)],
        "regression_paths": [str(regression)], "output_dir": str(tmp_path / "out"), "seed": 0,
        "hyperparameters": {"backend": "vllm", "batch_size": 4, "max_new_tokens": 12, "bootstrap_resamples": 200,
                            "latency_signal": "tokens_and_wall_time"}}))  # fmt: skip
    done = subprocess.run([str(VLLM_PYTHON), "-m", "trainer", "gate", "--spec", str(spec)], cwd=REPO_ROOT,
                          env={**os.environ, **VLLM_ENV}, capture_output=True, text=True, timeout=600)  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0 and events and events[-1]["event"] == "done", done.stderr[-3000:]
    logs = [event["message"] for event in events if event["event"] == "log"]
    assert "baseline ready: the same vLLM engine without an adapter" in logs
    gate = json.loads(Path(events[-1]["files"]["gate"]).read_text())
    assert gate["measurement"]["interleaved"] is True and "one vLLM engine" in gate["measurement"]["how"]
    rows = {role: [json.loads(line) for line in Path(events[-1]["files"][f"{role}_results"]).read_text().splitlines()]
            for role in ("candidate", "baseline")}  # fmt: skip
    assert [row["batch"] for row in rows["candidate"]] == [row["batch"] for row in rows["baseline"]]
    # The candidate answers through its adapter and the baseline through none, on the same engine.
    assert [row["output"] for row in rows["candidate"]] != [row["output"] for row in rows["baseline"]]
