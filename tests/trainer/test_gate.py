"""The promotion gate: decisions on constructed results, and a real `python -m trainer gate` on the tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.tiny_model import REPO_ROOT, TINY_MODEL, TINY_TASKS, tiny_model, tiny_tasks
from trainer.adapters import save_adapter
from trainer.contracts import RunSpec, Task, TaskMetadata
from trainer.evaluate import Evaluation, evaluate_tasks
from trainer.gate import gate_tasks, interleaved
from trainer.rollout import Generation, GenerationHooks
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.decision import Decision, decide, mcnemar
from trainer.spec.eval import SamplingConfig
from trainer.spec.gate import GateConfig as Config
from trainer.spec.gate import Policy
from trainer.spec.stats import paired_difference_interval
from trainer.spec.tasks import stratified_sample, task_bucket, write_tasks
from trainer.verifiers import SafetyPolicy, get_verifier

POLICY = Policy()
CRITERIA = ["gain", "heldout_breakage", "buckets", "safety", "latency", "tokens", "regressions"]


def result(task_id: str, correct: bool, *, unsafe: bool = False, latency: float = 0.2, completion_tokens: int = 10,
           bucket: str | None = "wrong_tool", batch: int | None = None) -> dict:
    row = {"task_id": task_id, "bucket": bucket, "correct_arguments": correct, "execution_success": None,
           "unsafe_action": unsafe, "latency_s": latency, "prompt_tokens": 50, "completion_tokens": completion_tokens}
    return row if batch is None else {**row, "batch": batch}


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
    assert "above zero" in gain.reason and gain.values["p_value"] < 0.001
    assert [c.name for c in decision.criteria] == CRITERIA
    assert decision.to_json()["criteria"][0]["reason"] == gain.reason


# --- Gain: the test must be sound for few discordant tasks ---------------------------------


def test_four_fixed_and_none_broken_is_not_a_gain_though_the_bootstrap_interval_is_above_zero():
    # 10 of 40 before; after, the same 10 and 4 more. The percentile bootstrap calls that a gain;
    # exact McNemar on 4 discordant pairs, all one way, gives p = 2 / 2^4 = 0.125.
    small = results([index < 14 for index in range(40)])
    interval = paired_difference_interval([float(r["correct_arguments"]) for r in small],
                                          [float(r["correct_arguments"]) for r in BASELINE],
                                          resamples=POLICY.bootstrap_resamples, confidence=0.95, seed=0)
    assert interval.low > 0  # what the bootstrap-only gate passed on
    gain = criterion(decide(small, BASELINE, [], [], POLICY), "gain")
    assert not gain.passed and gain.values["low"] > 0
    assert gain.values["p_value"] == pytest.approx(0.125) and gain.values["method"] == "exact"
    assert "too few discordant tasks" in gain.reason and "p = 0.1250" in gain.reason
    assert not criterion(decide(small, BASELINE, [], [], Policy(test="mcnemar")), "gain").passed


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
    assert mcnemar(4, 0) == (pytest.approx(0.125), "exact")
    assert mcnemar(3, 3)[0] == pytest.approx(1.0)
    # (|30 - 10| - 1)^2 / 40 = 9.025, whose chi-square(1) tail is 0.00266.
    p_value, method = mcnemar(30, 10)
    assert p_value == pytest.approx(0.002663, abs=1e-5) and method.startswith("chi-square")
    assert mcnemar(0, 0) == (1.0, "exact")


def test_execution_success_without_an_environment_fails_the_gain():
    decision = decide(WINNER, BASELINE, [], [], Policy(metric="execution_success"))
    assert not criterion(decision, "gain").passed and "not measured" in criterion(decision, "gain").reason


# --- Held-out breakage and failure buckets ----------------------------------------------------


def test_a_candidate_that_breaks_too_many_held_out_tasks_fails_though_its_gain_is_significant():
    # The baseline passes t0-t19; the candidate breaks t0-t4 and fixes t20-t39: +15 points, McNemar p = 0.004.
    before = results([index < 20 for index in range(40)])
    after = results([index >= 5 for index in range(40)])
    decision = decide(after, before, [], [], POLICY)
    breakage = criterion(decision, "heldout_breakage")
    assert criterion(decision, "gain").passed and [c.name for c in decision.failed] == ["heldout_breakage"]
    assert breakage.values["broken"] == ["t0", "t1", "t2", "t3", "t4"] and breakage.values["allowed"] == 2
    assert "5 of the 20 held-out tasks the baseline passes now fail" in breakage.reason and "t0" in breakage.reason
    assert decide(after, before, [], [], Policy(max_heldout_broken_share=0.25)).passed


def bucketed(passed: dict[str, list[bool]]) -> list[dict]:
    return [result(f"{bucket}{index}", ok, bucket=bucket) for bucket, outcomes in passed.items()
            for index, ok in enumerate(outcomes)]  # fmt: skip


def test_a_bucket_that_collapses_fails_while_the_overall_rate_rises():
    # 10 tasks of bucket "refunds": the baseline passes 4, the candidate 1 (-30 points). Elsewhere it fixes 24
    # of 50 without breaking any, so the gain is clear and 3 broken of 30 passed is within the breakage limit.
    before = bucketed({"refunds": [i < 4 for i in range(10)], "lookup": [i < 26 for i in range(50)]})
    after = bucketed({"refunds": [i < 1 for i in range(10)], "lookup": [True] * 50})
    decision = decide(after, before, [], [], POLICY)
    buckets = criterion(decision, "buckets")
    assert criterion(decision, "gain").passed and criterion(decision, "heldout_breakage").passed
    assert [c.name for c in decision.failed] == ["buckets"]
    assert buckets.values["failing"] == ["refunds"] and buckets.values["checked"]["refunds"]["drop"] == 0.3
    assert "bucket refunds: 4/10 → 1/10" in buckets.reason
    assert criterion(decide(after, before, [], [], Policy(max_bucket_drop=0.3)), "buckets").passed


def test_buckets_smaller_than_the_minimum_and_tasks_without_a_bucket_are_not_checked_alone():
    before = bucketed({"tiny": [True] * 4, "lookup": [i < 10 for i in range(40)]})
    after = bucketed({"tiny": [False] * 4, "lookup": [True] * 40})
    buckets = criterion(decide(after, before, [], [], POLICY), "buckets")
    assert buckets.passed and buckets.values["unchecked"] == ["tiny"] and list(buckets.values["checked"]) == ["lookup"]
    assert not criterion(decide(after, before, [], [], Policy(min_bucket_tasks=4)), "buckets").passed
    unbucketed = [{**row, "bucket": None} for row in after]
    assert criterion(decide(unbucketed, [{**row, "bucket": None} for row in before], [], [], POLICY),
                     "buckets").values["checked"] == {}


# --- Safety, counted per task -----------------------------------------------------------------


def test_one_new_unsafe_action_offset_by_one_fixed_fails_safety():
    baseline = [{**row, "unsafe_action": row["task_id"] == "t5"} for row in BASELINE]
    swapped = [{**row, "unsafe_action": row["task_id"] == "t3"} for row in WINNER]
    decision = decide(swapped, baseline, [], [], POLICY)
    safety = criterion(decision, "safety")
    assert safety.values["candidate_rate"] == safety.values["baseline_rate"]  # the net rate did not move
    assert not safety.passed and [c.name for c in decision.failed] == ["safety"]
    assert safety.values["new_unsafe_tasks"] == ["t3"] and safety.values["no_longer_unsafe_count"] == 1
    assert "new unsafe actions on t3" in safety.reason
    assert criterion(decide(swapped, baseline, [], [], Policy(max_new_unsafe_tasks=1)), "safety").passed


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


# --- Regression tasks: every one by default ---------------------------------------------------


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


def test_the_gate_checks_every_regression_task_unless_told_to_sample(tmp_path):
    base = tiny_tasks()[0]
    regression = [Task(id=f"r{i}", messages=base.messages, tools=base.tools, expected_calls=base.expected_calls)
                  for i in range(80)]  # fmt: skip
    path = tmp_path / "regression.jsonl"
    write_tasks(path, regression)
    spec = RunSpec(kind="gate", base_model="demo", output_dir=str(tmp_path / "out"), task_paths=[str(TINY_TASKS)],
                   regression_paths=[str(path)])  # fmt: skip
    assert Config().regression_sample_size is None
    assert [task.id for task in gate_tasks(spec, Config()).regression] == [task.id for task in regression]
    assert len(gate_tasks(spec, Config(regression_sample_size=10)).regression) == 10


def test_the_gate_skips_bad_lines_of_both_task_sets_unless_strict(tmp_path):
    heldout, regression = tmp_path / "heldout.jsonl", tmp_path / "regression.jsonl"
    heldout.write_text(TINY_TASKS.read_text() + "{torn\n")
    regression.write_text("[]\n" + TINY_TASKS.read_text())
    spec = RunSpec(kind="gate", base_model="demo", output_dir=str(tmp_path / "out"), task_paths=[str(heldout)],
                   regression_paths=[str(regression)])  # fmt: skip
    tasks = gate_tasks(spec, Config(heldout_sample_size=None))
    assert len(tasks.heldout) == 5 and len(tasks.regression) == 5
    assert [(line.file, line.line) for line in tasks.skipped] == [("heldout.jsonl", 6), ("regression.jsonl", 1)]
    with pytest.raises(SpecError, match="heldout.jsonl:6: invalid JSON"):
        gate_tasks(spec, Config(strict_tasks=True))


# --- Latency: load on the machine cannot decide it --------------------------------------------


def batched(rows: list[dict], latencies: list[float], size: int = 8) -> list[dict]:
    """Rows as interleaved generation writes them: each task's batch, and the batch's wall time."""
    return [{**row, "batch": index // size, "latency_s": latencies[index // size]} for index, row in enumerate(rows)]


def test_a_candidate_slower_only_in_wall_time_passes_latency_by_default():
    # Tokens equal, every wall time doubled (as a delay on one model's run would): the default decides on tokens.
    slow = batched(WINNER, [2.0] * 5)
    decision = decide(slow, batched(BASELINE, [1.0] * 5), [], [], POLICY)
    latency = criterion(decision, "latency")
    assert latency.passed and decision.passed
    assert latency.values["wall_ratio"] == pytest.approx(2.0) and latency.values["wall_decided"] is False
    assert "reported, not decided" in latency.reason and "×2.00" in latency.reason


def test_a_candidate_that_generates_twice_the_tokens_fails_latency():
    wordy = [{**row, "completion_tokens": 20} for row in WINNER]
    latency = criterion(decide(wordy, BASELINE, [], [], POLICY), "latency")
    assert not latency.passed and latency.values["tokens_ratio"] == pytest.approx(2.0)
    assert "tokens over the limit" in latency.reason
    within = [{**row, "completion_tokens": 12} for row in WINNER]
    assert criterion(decide(within, BASELINE, [], [], POLICY), "latency").passed


def test_wall_time_decides_only_when_its_paired_interval_lies_wholly_above_the_limit():
    wall = Policy(latency_signal="tokens_and_wall_time")
    baseline = batched(BASELINE, [1.0] * 5)
    slower = criterion(decide(batched(WINNER, [2.0, 2.1, 1.9, 2.0, 2.2]), baseline, [], [], wall), "latency")
    assert not slower.passed and slower.values["wall_low"] > 1.25 and "wall time over the limit" in slower.reason
    # Slower by 39% on the geometric mean, over the limit, but the batches disagree: the interval is not wholly above.
    noisy = criterion(decide(batched(WINNER, [0.7, 2.6, 1.0, 2.2, 1.3]), baseline, [], [], wall), "latency")
    assert noisy.passed and noisy.values["wall_low"] <= 1.25 < noisy.values["wall_ratio"]
    assert noisy.values["units"] == 5 and noisy.values["paired_by"] == "batch"


class FakeMachine:
    """A machine whose load a test injects: each generate call costs tokens x seconds per token x load."""

    def __init__(self, loaded_calls: range = range(0)) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.loaded_calls = loaded_calls


class FakeBackend:
    name = "fake"

    def __init__(self, role: str, machine: FakeMachine, tokens: int = 10, delay: float = 1.0) -> None:
        self.role, self.machine, self.tokens, self.delay = role, machine, tokens, delay

    def generate(self, prompts, sampling, hooks=None):
        load = 3.0 if len(self.machine.calls) in self.machine.loaded_calls else 1.0
        self.machine.calls.append((self.role, tuple(prompts)))
        seconds = 0.01 * self.tokens * load * self.delay
        return [[Generation("no call", 5, self.tokens, True, seconds)] for _ in prompts]


def fake_evaluation(backend: FakeBackend) -> Evaluation:
    return Evaluation(backend=backend, render=lambda task: task.id, verifier=get_verifier("binary"),
                      policy=SafetyPolicy.default())


def interleaved_rows(machine: FakeMachine, candidate: dict | None = None) -> dict[str, list[dict]]:
    evaluations = {"candidate": fake_evaluation(FakeBackend("candidate", machine, **(candidate or {}))),
                   "baseline": fake_evaluation(FakeBackend("baseline", machine))}
    return interleaved(GATE_TASKS, evaluations, SamplingConfig(batch_size=8), GenerationHooks())


GATE_TASKS = [Task(id=f"t{i:02d}", messages=tiny_tasks()[0].messages, tools=tiny_tasks()[0].tools,
                   expected_calls=tiny_tasks()[0].expected_calls) for i in range(32)]  # fmt: skip
WALL = Policy(latency_signal="tokens_and_wall_time", min_bucket_tasks=100)


def decide_on(rows: dict[str, list[dict]], policy: Policy) -> Decision:
    return decide(rows["candidate"], rows["baseline"], [], [], policy)


def test_interleaved_generation_alternates_the_models_on_the_same_batches():
    machine = FakeMachine()
    rows = interleaved_rows(machine)
    assert [role for role, _ in machine.calls] == ["candidate", "baseline", "baseline", "candidate"] * 2
    assert all(machine.calls[i][1] == machine.calls[i + 1][1] for i in range(0, 8, 2))  # same tasks, both models
    assert [row["task_id"] for row in rows["candidate"]] == [task.id for task in GATE_TASKS]
    assert [row["batch"] for row in rows["baseline"]] == [i // 8 for i in range(32)]


def test_load_on_the_machine_during_part_of_the_run_falls_on_both_models_alike():
    # Three times the cost for calls 2-5. Interleaved, those are both models' batches 1 and 2: paired, no change.
    rows = interleaved_rows(FakeMachine(loaded_calls=range(2, 6)))
    latency = criterion(decide_on(rows, WALL), "latency")
    assert latency.passed and latency.values["wall_ratio"] == pytest.approx(1.0)
    # One model after the other (as the gate ran before), the same 4 loaded calls are all the candidate's.
    machine = FakeMachine(loaded_calls=range(0, 4))
    rows = {role: [{**found.to_json(), "batch": start // 8} for start in range(0, 32, 8)
                   for found in evaluate_tasks(GATE_TASKS[start : start + 8],
                                               fake_evaluation(FakeBackend(role, machine)), SamplingConfig())]
            for role in ("candidate", "baseline")}  # fmt: skip
    assert [role for role, _ in machine.calls] == ["candidate"] * 4 + ["baseline"] * 4
    assert not criterion(decide_on(rows, WALL), "latency").passed


def test_an_injected_delay_on_one_models_run_with_equal_tokens_does_not_fail_the_default_gate():
    rows = interleaved_rows(FakeMachine(), candidate={"delay": 2.0})
    latency = criterion(decide_on(rows, Policy(min_bucket_tasks=100)), "latency")
    assert latency.passed and latency.values["wall_ratio"] == pytest.approx(2.0)
    assert latency.values["tokens_ratio"] == pytest.approx(1.0)


def test_a_model_that_truly_generates_twice_the_tokens_fails_latency_however_it_is_measured():
    rows = interleaved_rows(FakeMachine(), candidate={"tokens": 20})
    for policy in (Policy(), WALL):
        latency = criterion(decide_on(rows, policy), "latency")
        assert not latency.passed and latency.values["tokens_ratio"] == pytest.approx(2.0)


def test_tokens_over_budget_fail_the_tokens_criterion():
    wordy = [{**row, "completion_tokens": 60} for row in WINNER]
    budget = Policy(max_tokens_per_task=100, max_tokens_increase=None)
    tokens = criterion(decide(wordy, BASELINE, [], [], budget), "tokens")
    assert not tokens.passed and tokens.values["budget"] == 100
    assert criterion(decide(WINNER, BASELINE, [], [], Policy(max_tokens_per_task=100)), "tokens").passed


# --- Inputs and the policy --------------------------------------------------------------------


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


@pytest.mark.parametrize("values, message", [
    ({"max_heldout_broken_share": 1.5}, "max_heldout_broken_share must be between 0 and 1"),
    ({"max_bucket_drop": -0.1}, "max_bucket_drop must be between 0 and 1"),
    ({"min_bucket_tasks": 0}, "min_bucket_tasks must be at least 1"),
    ({"max_new_unsafe_tasks": -1}, "max_new_unsafe_tasks must be at least 0"),
    ({"max_latency_increase": -0.5}, "max_latency_increase must be at least 0"),
    ({"latency_signal": "vibes"}, "unknown latency_signal"),
])  # fmt: skip
def test_the_config_checks_the_new_knobs(values, message):
    with pytest.raises(SpecError, match=message):
        config_from_json(Config, values, "gate hyperparameters")


def test_a_policy_stored_before_the_new_knobs_loads_with_their_defaults():
    stored = {"metric": "correct_arguments", "test": "bootstrap", "alpha": 0.05, "max_unsafe_increase": 0.0,
              "max_latency_p95_increase": 0.5, "max_tokens_per_task": None, "max_tokens_increase": 0.5,
              "max_regression_failures": 0, "bootstrap_resamples": 2000}  # fmt: skip
    policy = Policy.from_stored(stored)
    assert policy.max_latency_increase == 0.5 and policy.latency_signal == "tokens"
    assert (policy.max_new_unsafe_tasks, policy.min_bucket_tasks, policy.max_bucket_drop) == (0, 5, 0.25)
    assert Policy.from_stored({}) == Policy() and Policy.from_stored(policy.to_json()) == policy


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
    spec = gate_spec(tmp_path, adapter=str(adapter(tmp_path / "candidate")))
    with (tmp_path / "regression.jsonl").open("a") as regression:
        regression.write("{torn\n")  # skipped, and reported in the done event
    code, events = run_gate(spec)
    done = events[-1]
    assert code == 0 and done["event"] == "done", done
    skipped = done["metrics"]["skipped_tasks"]
    assert skipped["count"] == 1 and skipped["first"][0]["file"] == "regression.jsonl"
    assert skipped["first"][0]["line"] == 3
    assert any(e["event"] == "log" and e["message"].startswith("skipped 1 bad task line(s)") for e in events)
    gate = json.loads(Path(done["files"]["gate"]).read_text())
    assert [c["name"] for c in gate["decision"]["criteria"]] == CRITERIA
    assert gate["measurement"]["interleaved"] is True and gate["measurement"]["batches"] == 2
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


@pytest.mark.slow
def test_a_gate_with_max_turns_plays_episodes_for_both_models(tmp_path):
    orders = REPO_ROOT / "trainer" / "examples" / "orders_tasks.jsonl"
    spec = gate_spec(tmp_path, adapter=str(adapter(tmp_path / "candidate")), task_paths=[str(orders)])
    data = json.loads(spec.read_text())
    (tmp_path / "regression.jsonl").write_text("".join(orders.read_text().splitlines(keepends=True)[:2]))
    data["hyperparameters"].update(environment="trainer.examples.orders:environment", max_turns=2)
    spec.write_text(json.dumps(data))
    code, events = run_gate(spec)
    done = events[-1]
    assert code == 0 and done["event"] == "done", done
    for role in ("candidate_results", "baseline_results"):
        rows = [json.loads(line) for line in Path(done["files"][role]).read_text().splitlines()]
        assert len(rows) == 6 and all(1 <= row["turns"] <= 2 and row["ended"] for row in rows)
        assert all(row["execution_success"] is not None for row in rows)
    gate = json.loads(Path(done["files"]["gate"]).read_text())
    assert gate["candidate"]["overall"]["turns_per_episode"] >= 1


def test_a_gate_without_a_candidate_adapter_is_a_bad_spec(tmp_path):
    code, events = run_gate(gate_spec(tmp_path))
    assert code != 0 and events[-1]["kind"] == "bad_spec" and "candidate adapter" in events[-1]["message"]


def test_a_gate_whose_task_names_a_broken_environment_stops_before_loading_a_model(tmp_path):
    orders = REPO_ROOT / "trainer" / "examples" / "orders_tasks.jsonl"
    line = json.loads(orders.read_text().splitlines()[0])
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text(json.dumps({**line, "episode": {"environment": "trainer.examples.orders:nope"}}) + "\n")
    spec = gate_spec(tmp_path, adapter=str(tmp_path / "candidate"), task_paths=[str(heldout)])
    code, events = run_gate(spec)
    assert code != 0 and events[-1]["kind"] == "bad_spec"
    assert "environment 'trainer.examples.orders:nope' of task orders-refund-latest-ana cannot be built: " \
           "environment trainer.examples.orders:nope: trainer.examples.orders has no nope" in events[-1]["message"]
    assert not any(e["event"] == "log" and " ready: " in e["message"] for e in events)
