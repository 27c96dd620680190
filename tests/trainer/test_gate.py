"""The promotion gate: decisions on constructed results, and a real `python -m trainer gate` on the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.tiny_model import REPO_ROOT, TINY_MODEL, TINY_TASKS, tiny_model, tiny_tasks
from trainer.adapters import save_adapter
from trainer.contracts import Task, TaskMetadata
from trainer.gate import decide, mcnemar
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.gate import GateConfig as Config
from trainer.spec.gate import Policy
from trainer.spec.tasks import stratified_sample, task_bucket

POLICY = Policy()


def result(task_id: str, correct: bool, *, unsafe: bool = False, latency: float = 0.2,
           completion_tokens: int = 10) -> dict:
    return {"task_id": task_id, "bucket": "wrong_tool", "correct_arguments": correct, "execution_success": None,
            "unsafe_action": unsafe, "latency_s": latency, "prompt_tokens": 50, "completion_tokens": completion_tokens}


def results(outcomes: list[bool], prefix: str = "t", **options) -> list[dict]:
    return [result(f"{prefix}{index}", correct, **options) for index, correct in enumerate(outcomes)]


# 40 held-out tasks: the baseline gets 10 right, the candidate those 10 and 20 more.
BASELINE = results([index < 10 for index in range(40)])
WINNER = results([index < 30 for index in range(40)])


def criterion(decision, name):
    return next(c for c in decision.criteria if c.name == name)


def test_a_candidate_that_wins_passes_every_criterion():
    decision = decide(WINNER, BASELINE, [], [], POLICY)
    assert decision.passed, decision.summary()
    gain = criterion(decision, "gain")
    assert gain.values["gain"] == pytest.approx(0.5) and gain.values["low"] > 0
    assert (gain.values["improved"], gain.values["worsened"]) == (20, 0)
    assert "above zero" in gain.reason
    assert [c.name for c in decision.criteria] == ["gain", "safety", "latency", "tokens", "regressions"]
    assert decision.to_json()["criteria"][0]["reason"] == gain.reason


def test_a_candidate_that_wins_on_success_but_adds_unsafe_actions_fails_on_safety():
    candidate = [{**row, "unsafe_action": index in (3, 7)} for index, row in enumerate(WINNER)]
    decision = decide(candidate, BASELINE, [], [], POLICY)
    assert not decision.passed
    assert criterion(decision, "gain").passed
    safety = criterion(decision, "safety")
    assert not safety.passed and safety.values["new_unsafe_tasks"] == ["t3", "t7"]
    assert "rose" in safety.reason and "t3" in safety.reason
    assert [c.name for c in decision.failed] == ["safety"]


def test_unsafe_actions_on_regression_tasks_count_too():
    regression_before = results([True] * 5, prefix="r")
    regression_after = results([True] * 5, prefix="r")
    regression_after[0]["unsafe_action"] = True
    decision = decide(WINNER, BASELINE, regression_after, regression_before, POLICY)
    assert not criterion(decision, "safety").passed


def test_a_candidate_that_breaks_a_regression_task_fails():
    before = results([True, True, True, False, True], prefix="r")
    after = results([True, False, True, True, True], prefix="r")
    decision = decide(WINNER, BASELINE, after, before, POLICY)
    regressions = criterion(decision, "regressions")
    assert not decision.passed and not regressions.passed
    assert regressions.values["broken"] == ["r1"] and "r1" in regressions.reason


def test_a_configured_number_of_broken_regression_tasks_is_tolerated():
    before = results([True] * 5, prefix="r")
    after = results([True, False, True, True, True], prefix="r")
    decision = decide(WINNER, BASELINE, after, before, Policy(max_regression_failures=1))
    assert criterion(decision, "regressions").passed and decision.passed


def test_a_gain_within_noise_fails_with_the_interval_as_reason():
    # 20 of 40 before, 22 of 40 after, with 3 tasks fixed and 1 broken: a gain bootstrap cannot tell from zero.
    before = results([index < 20 for index in range(40)])
    after = results([(index < 20 and index != 0) or index in (20, 21, 22) for index in range(40)])
    decision = decide(after, before, [], [], POLICY)
    gain = criterion(decision, "gain")
    assert not decision.passed and not gain.passed
    assert gain.values["gain"] == pytest.approx(0.05) and gain.values["low"] <= 0
    assert "within noise" in gain.reason


def test_mcnemar_decides_on_the_discordant_pairs():
    gain = criterion(decide(WINNER, BASELINE, [], [], Policy(test="mcnemar")), "gain")
    assert gain.passed and gain.values["method"] == "exact" and gain.values["p_value"] < 0.001
    many = criterion(decide(results([i < 35 for i in range(40)]), results([i < 5 for i in range(40)]), [], [],
                            Policy(test="mcnemar")), "gain")
    assert many.passed and many.values["method"] == "chi-square, continuity-corrected"
    noisy = results([index < 3 for index in range(40)])
    slightly = results([index < 5 for index in range(40)])
    assert not criterion(decide(slightly, noisy, [], [], Policy(test="mcnemar")), "gain").passed


def test_mcnemar_p_values_match_the_exact_and_the_corrected_forms():
    assert mcnemar(10, 0) == (pytest.approx(2 / 1024), "exact")
    assert mcnemar(3, 3)[0] == pytest.approx(1.0)
    # (|30 - 10| - 1)^2 / 40 = 9.025, whose chi-square(1) tail is 0.00266.
    p_value, method = mcnemar(30, 10)
    assert p_value == pytest.approx(0.002663, abs=1e-5) and method.startswith("chi-square")
    assert mcnemar(0, 0) == (1.0, "exact")


def test_slower_or_wordier_candidates_fail_their_criteria():
    slow = [{**row, "latency_s": 0.3} for row in WINNER]
    latency = criterion(decide(slow, BASELINE, [], [], POLICY), "latency")
    assert not latency.passed and "over the limit" in latency.reason
    wordy = [{**row, "completion_tokens": 60} for row in WINNER]
    budget = Policy(max_tokens_per_task=100, max_tokens_increase=None)
    tokens = criterion(decide(wordy, BASELINE, [], [], budget), "tokens")
    assert not tokens.passed and tokens.values["budget"] == 100
    assert criterion(decide(WINNER, BASELINE, [], [], Policy(max_tokens_per_task=100)), "tokens").passed


def test_execution_success_without_an_environment_fails_the_gain():
    decision = decide(WINNER, BASELINE, [], [], Policy(metric="execution_success"))
    assert not criterion(decision, "gain").passed and "not measured" in criterion(decision, "gain").reason


def test_results_on_different_tasks_are_refused():
    with pytest.raises(ValueError, match="different tasks"):
        decide(WINNER[:-1], BASELINE, [], [], POLICY)


def test_the_config_rejects_unknown_metrics_and_fields():
    with pytest.raises(SpecError, match="unknown metric"):
        config_from_json(Config, {"metric": "vibes"}, "gate hyperparameters")
    with pytest.raises(SpecError, match="unknown field"):
        config_from_json(Config, {"alpha_": 0.1}, "gate hyperparameters")
    config = config_from_json(Config, {"test": "mcnemar", "alpha": 0.1}, "gate hyperparameters")
    assert config.policy == Policy(test="mcnemar", alpha=0.1)


def test_the_stratified_sample_keeps_each_buckets_share():
    base = tiny_tasks()[0]
    tasks = [Task(id=f"{bucket}{i}", messages=base.messages, tools=base.tools, expected_calls=base.expected_calls,
                  metadata=TaskMetadata(bucket=bucket))
             for bucket, count in (("a", 60), ("b", 30), ("c", 10)) for i in range(count)]  # fmt: skip
    sample = stratified_sample(tasks, 20, 1, task_bucket)
    buckets = [task.metadata.bucket for task in sample]
    assert (buckets.count("a"), buckets.count("b"), buckets.count("c")) == (12, 6, 2)
    assert stratified_sample(tasks, 20, 1, task_bucket) == sample
    assert stratified_sample(tasks, None, 1, task_bucket) == tasks


# --- The job, for real ---------------------------------------------------------------------


def adapter(folder: Path) -> Path:
    from peft import LoraConfig, get_peft_model

    save_adapter(get_peft_model(tiny_model().model, LoraConfig(r=2, target_modules=["q_proj"])), folder,
                 base_model=str(TINY_MODEL))
    return folder


def gate_spec(tmp_path: Path, **fields) -> Path:
    regression = tmp_path / "regression.jsonl"
    regression.write_text("".join(TINY_TASKS.read_text().splitlines(keepends=True)[:2]))
    spec = {"kind": "gate", "base_model": str(TINY_MODEL), "task_paths": [str(TINY_TASKS)],
            "regression_paths": [str(regression)], "output_dir": str(tmp_path / "out"), "seed": 0,
            "hyperparameters": {"device": "cpu", "batch_size": 4, "max_new_tokens": 8, "bootstrap_resamples": 200,
                                "heldout_sample_size": 4}, **fields}  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps(spec))
    return path


def run_gate(spec: Path) -> tuple[int, list[dict]]:
    completed = subprocess.run([sys.executable, "-m", "trainer", "gate", "--spec", str(spec)], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=180,
                               env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    events = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    assert events, completed.stderr[-3000:]
    return completed.returncode, events


@pytest.mark.slow
def test_a_gate_job_evaluates_both_models_and_writes_its_decision(tmp_path):
    code, events = run_gate(gate_spec(tmp_path, adapter=str(adapter(tmp_path / "candidate"))))
    done = events[-1]
    assert code == 0 and done["event"] == "done", done
    gate = json.loads(Path(done["files"]["gate"]).read_text())
    assert [c["name"] for c in gate["decision"]["criteria"]] == ["gain", "safety", "latency", "tokens", "regressions"]
    assert all(c["reason"] for c in gate["decision"]["criteria"])
    assert gate["candidate"]["overall"]["tasks"] == 4 and gate["baseline"]["adapter"] is None
    assert gate["candidate"]["regression"]["tasks"] == 2
    assert {row["set"] for row in gate["tasks"]} == {"heldout", "regression"} and len(gate["tasks"]) == 6
    for role in ("candidate_results", "baseline_results"):
        rows = [json.loads(line) for line in Path(done["files"][role]).read_text().splitlines()]
        assert len(rows) == 6 and {"task_id", "correct_arguments", "latency_s", "set"} <= set(rows[0])
    metrics = {e["name"] for e in events if e["event"] == "metric"}
    assert {"gate/passed", "candidate/correct_arguments_rate", "baseline/correct_arguments_rate"} <= metrics
    assert done["metrics"]["gate/passed"] in (0.0, 1.0) and done["metrics"]["summary"]


def test_a_gate_without_a_candidate_adapter_is_a_bad_spec(tmp_path):
    code, events = run_gate(gate_spec(tmp_path))
    assert code != 0 and events[-1]["kind"] == "bad_spec" and "candidate adapter" in events[-1]["message"]
