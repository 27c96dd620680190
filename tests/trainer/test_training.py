"""The `sft` and `grpo` jobs on the tiny model: events, adapters, checkpoints, stop and resume, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.tiny_model import REPO_ROOT, TINY_MODEL, TINY_TASKS, tiny_model
from trainer import grpo, sft, training
from trainer.adapters import save_adapter
from trainer.jobs import EXIT_FAILED, EXIT_STOPPED, run_job
from trainer.spec.adapters import CHECKPOINTS, MANIFEST_FILE, WEIGHTS_FILE, file_sha256, verify_adapter
from trainer.spec.grpo import GrpoConfig

OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
EXAMPLES = REPO_ROOT / "trainer" / "examples"


def spec_file(tmp_path: Path, kind: str, **hyperparameters) -> Path:
    """The tiny example spec of `kind` with absolute paths and `hyperparameters` overridden."""
    spec = json.loads((EXAMPLES / f"tiny_{kind}.json").read_text())
    spec.update(base_model=str(TINY_MODEL), task_paths=[str(TINY_TASKS)], heldout_paths=[str(TINY_TASKS)],
                output_dir=str(tmp_path / "out"))
    adapter = hyperparameters.pop("adapter", None)
    spec["adapter"] = adapter
    for key in ("task_paths", "heldout_paths"):
        if key in hyperparameters:
            spec[key] = hyperparameters.pop(key)
    spec["hyperparameters"] = {**spec["hyperparameters"], **hyperparameters}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(spec))
    return path


def events_in(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run_in_process(kind: str, spec: Path, capfd) -> tuple[int, list[dict]]:
    body = {"sft": sft.run, "grpo": grpo.run}[kind]
    code = run_job(spec, kind, body)
    return code, events_in(capfd.readouterr().out)


def metric_names(events: list[dict], step: int | None = None) -> set[str]:
    return {e["name"] for e in events if e["event"] == "metric" and (step is None or e["step"] == step)}


def test_sft_trains_an_adapter_and_reports_it(tmp_path, capfd):
    code, events = run_in_process("sft", spec_file(tmp_path, "sft"), capfd)
    assert code == 0, events[-1]
    done = events[-1]
    assert done["event"] == "done"
    adapter = Path(done["files"]["adapter_dir"])
    manifest = json.loads((adapter / MANIFEST_FILE).read_text())
    assert manifest["sha256"] == file_sha256(adapter / WEIGHTS_FILE)
    assert manifest["config"]["kind"] == "sft" and manifest["base_model"] == str(TINY_MODEL)
    verify_adapter(adapter)
    assert {"loss", "learning_rate"} <= metric_names(events)
    assert "heldout/correct_arguments_rate" in metric_names(events, step=0)
    checkpoints = [e for e in events if e["event"] == "checkpoint"]
    assert checkpoints and (Path(checkpoints[-1]["path"]) / MANIFEST_FILE).is_file()
    assert done["metrics"]["steps"] == 3 and "heldout/correct_arguments_rate" in done["metrics"]
    # The tiny spec keeps its run short with a max_length that cuts the two WorkBench examples, prompt and all:
    # both are said before any step.
    cut = [e["message"] for e in events if e["event"] == "log" and e["message"].startswith("max_length 600")]
    assert cut == [
        "max_length 600 (as set) cuts 2 of 4 prompts with their answers (longest 3190 tokens, 99th percentile 3176)",
        "max_length 600 leaves no answer token in 2 of 4 examples: they are not trained on",
    ]


@pytest.mark.parametrize("checkpointing", [True, False])
def test_sft_changes_the_adapter_and_leaves_the_base_weights(tmp_path, capfd, monkeypatch, checkpointing):
    trained = spy_on_final_model(monkeypatch)
    code, events = run_in_process("sft", spec_file(tmp_path, "sft", gradient_checkpointing=checkpointing), capfd)
    assert code == 0, events[-1]
    assert_only_lora_changed(trained["model"])
    assert trained["model"].is_activation_checkpointing is checkpointing


@pytest.mark.parametrize(("max_length", "checkpointing"), [(600, False), (3200, True)])
def test_gradient_checkpointing_left_null_turns_on_for_sequences_past_1024_tokens(
    tmp_path, capfd, monkeypatch, max_length, checkpointing
):
    # The two WorkBench examples hold 3,190 tokens; a max_length of 600 cuts them to 600.
    trained = spy_on_final_model(monkeypatch)
    spec = spec_file(tmp_path, "sft", max_length=max_length, gradient_checkpointing=None, max_truncated_share=1.0)
    code, events = run_in_process("sft", spec, capfd)
    assert code == 0, events[-1]
    assert trained["model"].is_activation_checkpointing is checkpointing
    said = [e["message"] for e in events if e["event"] == "log" and e["message"].startswith("gradient_checkpointing")]
    assert said == ([f"gradient_checkpointing on (null): sequences of up to {3190} tokens, past 1024, where "
                     "attention's memory grows with the square of their length"] if checkpointing else [])


def test_grpo_reports_rewards_per_component_held_out_metrics_samples_and_checkpoints(tmp_path, capfd):
    code, events = run_in_process("grpo", spec_file(tmp_path, "grpo"), capfd)
    assert code == 0, events[-1]
    assert {"reward/mean", "reward/std", "tied_group_fraction", "completion_length", "loss"} <= metric_names(events, 1)
    assert any(name.startswith("reward/") and name.count("/") == 2 for name in metric_names(events, 2))
    assert "tokens_per_second" in metric_names(events)
    assert {e["step"] for e in events if e["event"] == "metric" and e["name"].startswith("heldout/")} == {0, 2, 4}
    checkpoints = [e["step"] for e in events if e["event"] == "checkpoint"]
    assert checkpoints == [2, 4]
    samples = [e for e in events if e["event"] == "sample"]
    assert len(samples) == 4 and all(sample["components"] for sample in samples)
    assert samples[0]["prompt"] and "<|im_start|>" not in samples[0]["prompt"]
    done = events[-1]
    assert done["event"] == "done" and done["metrics"]["steps"] == 4
    verify_adapter(done["files"]["adapter_dir"])


@pytest.mark.slow
def test_grpo_with_the_judge_as_reward_loads_the_judge_and_logs_its_components(tmp_path, capfd):
    spec = spec_file(tmp_path, "grpo", reward="judge", judge_model=str(TINY_MODEL), judge_max_new_tokens=4,
                     max_steps=2, eval_interval=0, checkpoint_interval=0, dynamic_sampling_redraws=0)
    code, events = run_in_process("grpo", spec, capfd)
    assert code == 0, events[-1]
    assert any(e["event"] == "log" and e["message"] == f"reward: the judge {TINY_MODEL}" for e in events)
    # The tiny model's replies hold no score: each is read as unreadable and scored 0, never guessed.
    unreadable = [e["value"] for e in events if e["event"] == "metric" and e["name"] == "reward/judge_unreadable/mean"]
    assert unreadable == [1.0, 1.0]
    assert events[-1]["event"] == "done" and events[-1]["metrics"]["steps"] == 2


@pytest.mark.slow
def test_grpo_with_the_judge_scoring_groups_loads_the_judge_and_logs_each_groups_spread(tmp_path, capfd):
    # 4 generations: the judge's reply has room for 16 tokens per candidate.
    spec = spec_file(tmp_path, "grpo", reward="judge", judge_model=str(TINY_MODEL), judge_mode="group",
                     judge_max_new_tokens=64, max_steps=2, eval_interval=0, checkpoint_interval=0,
                     dynamic_sampling_redraws=0)  # fmt: skip
    code, events = run_in_process("grpo", spec, capfd)
    assert code == 0, events[-1]
    assert any(e["event"] == "log" and e["message"] == f"reward: the judge {TINY_MODEL}, group-relative: the 4 "
               "answers to a prompt judged together" for e in events)  # fmt: skip
    metrics = {e["name"]: [] for e in events if e["event"] == "metric"}
    for e in events:
        if e["event"] == "metric":
            metrics[e["name"]].append(e["value"])
    # The tiny model writes no score lines: every candidate is unreadable, scored 0, and its group has no spread.
    assert metrics["reward/judge_unreadable/mean"] == [1.0, 1.0]
    assert metrics["reward/judge_group_spread/mean"] == [0.0, 0.0]
    assert events[-1]["event"] == "done" and events[-1]["metrics"]["steps"] == 2


@pytest.mark.parametrize("checkpointing", [True, False])
def test_grpo_changes_the_adapter_and_leaves_the_base_weights(tmp_path, capfd, monkeypatch, checkpointing):
    # The tiny random model's completions all score alike, which gives GRPO no advantage to follow;
    # rewarding length gives the groups a spread, so the step has a gradient.
    monkeypatch.setattr(grpo.TaskReward, "__call__", rewarded_by_length)
    trained = spy_on_final_model(monkeypatch)
    # Every random completion runs into the 16-token limit: masking cut ones (the default) would leave no loss.
    spec = spec_file(tmp_path, "grpo", eval_interval=0, checkpoint_interval=0, gradient_checkpointing=checkpointing,
                     mask_truncated_completions=False)
    code, events = run_in_process("grpo", spec, capfd)
    assert code == 0, events[-1]
    assert any(e["name"] == "grad_norm" and e["value"] > 0 for e in events if e["event"] == "metric")
    assert_only_lora_changed(trained["model"])
    assert trained["model"].is_activation_checkpointing is checkpointing


def rewarded_by_length(self, prompts, completions, task_id, **_):
    pairs = zip(task_id, completions, strict=True)
    self.last_batch = [grpo.Scored(task, text, float(len(text)), {"length": float(len(text))}) for task, text in pairs]
    return [float(len(completion)) for completion in completions]


def spy_on_final_model(monkeypatch) -> dict:
    seen: dict = {}
    original = training.save_final

    def spy(model, *args, **kwargs):
        seen["model"] = model
        return original(model, *args, **kwargs)

    monkeypatch.setattr(training, "save_final", spy)
    return seen


def assert_only_lora_changed(model) -> None:
    """LoRA's B matrices start at zero; training moved them. Every base weight equals the file's."""
    base = dict(tiny_model().model.state_dict())
    lora_b = {name: p for name, p in model.named_parameters() if "lora_B" in name}
    assert lora_b and any(p.detach().abs().sum() > 0 for p in lora_b.values())
    compared = 0
    for name, tensor in model.state_dict().items():
        if "lora_" in name:
            continue
        plain = name.removeprefix("base_model.model.").replace(".base_layer", "")
        assert (tensor == base[plain]).all(), f"base weight {plain} changed"
        compared += 1
    assert compared == len(base)


# --- Bad input: an error event naming the problem before any step runs ----------------------


def other_base_adapter(tmp_path: Path) -> Path:
    from peft import LoraConfig, get_peft_model

    folder = tmp_path / "other-adapter"
    peft_model = get_peft_model(tiny_model().model, LoraConfig(r=2, target_modules=["q_proj"]))
    save_adapter(peft_model, folder, base_model="HuggingFaceTB/SmolLM2-1.7B-Instruct")
    return folder


@pytest.mark.parametrize("kind", ["sft", "grpo"])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"learning_rate": 0}, "learning_rate must be above 0"),
        ({"task_paths": ["empty.jsonl"]}, "the train snapshot has no usable tasks: the task snapshot is empty"),
        ({"adapter": "other"}, "was trained on base model 'HuggingFaceTB/SmolLM2-1.7B-Instruct'"),
    ],
)
def test_bad_input_fails_before_any_step(tmp_path, capfd, kind, change, message):
    change = dict(change)
    if "task_paths" in change:
        (tmp_path / "empty.jsonl").write_text("")
        change["task_paths"] = [str(tmp_path / "empty.jsonl")]
    if change.get("adapter") == "other":
        change["adapter"] = str(other_base_adapter(tmp_path))
    code, events = run_in_process(kind, spec_file(tmp_path, kind, **change), capfd)
    assert code == EXIT_FAILED
    assert events[-1]["event"] == "error" and message in events[-1]["message"]
    assert not [e for e in events if e["event"] == "metric" and e["step"] > 0]


@pytest.mark.parametrize(("kind", "limit"), [("grpo", "max_completion_length"), ("sft", "max_length")])
def test_a_length_limit_that_cuts_the_answers_is_refused_before_any_step(tmp_path, capfd, kind, limit):
    spec = spec_file(tmp_path, kind, **{limit: 4, "max_truncated_share": 0.0})
    code, events = run_in_process(kind, spec, capfd)
    assert code == EXIT_FAILED and events[-1]["kind"] == "bad_spec"
    message = events[-1]["message"]
    assert f"{limit} 4 would cut 4 of 4" in message and f"set {limit} to at least" in message
    assert any(e["event"] == "metric" and e["name"] == f"length/{limit}/cut_share" and e["value"] == 1.0
               for e in events)
    assert not [e for e in events if e["event"] == "metric" and e["step"] > 0]


def test_grpo_refuses_a_loss_type_trl_would_only_reject_at_the_first_loss(tmp_path, capfd):
    code, events = run_in_process("grpo", spec_file(tmp_path, "grpo", loss_type="ppo"), capfd)
    assert code == EXIT_FAILED
    assert events[-1]["kind"] == "bad_spec"
    assert "unknown loss_type 'ppo'; known: dapo, dr_grpo, grpo" in events[-1]["message"]


def test_grpo_configs_accept_gspo_and_dapo():
    gspo = GrpoConfig(loss_type="grpo", importance_sampling_level="sequence", num_iterations=2)
    assert gspo.importance_sampling_level == "sequence"
    assert GrpoConfig(loss_type="dapo", epsilon_high=0.28, steps_per_generation=2).loss_type == "dapo"
    with pytest.raises(ValueError, match="num_generations must be at least 2"):
        GrpoConfig(num_generations=1)


# --- SIGTERM saves a checkpoint; resume continues from it ------------------------------------


def start_trainer(kind: str, spec: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainer", kind, "--spec", str(spec)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=OFFLINE)


def test_sigterm_saves_a_checkpoint_and_resume_continues_from_it(tmp_path):
    spec = spec_file(tmp_path, "grpo", max_steps=30, eval_interval=0, checkpoint_interval=100)
    process = start_trainer("grpo", spec)
    assert process.stdout is not None
    events = []
    for line in process.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "metric" and events[-1]["step"] >= 2:
            process.send_signal(signal.SIGTERM)
            break
    events += events_in(process.stdout.read())
    assert process.wait(timeout=60) == EXIT_STOPPED
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "stopped"
    stopped_at = [e for e in events if e["event"] == "checkpoint"][-1]["step"]
    assert 2 <= stopped_at < 30
    verify_adapter(tmp_path / "out" / CHECKPOINTS / f"checkpoint-{stopped_at}")

    spec = spec_file(tmp_path, "grpo", max_steps=stopped_at + 2, eval_interval=0, checkpoint_interval=100,
                     resume=True)
    resumed = subprocess.run([sys.executable, "-m", "trainer", "grpo", "--spec", str(spec)], cwd=REPO_ROOT,
                             capture_output=True, text=True, env=OFFLINE, timeout=120)
    events = events_in(resumed.stdout)
    assert resumed.returncode == 0, events[-1]
    assert any("resuming from" in e.get("message", "") for e in events if e["event"] == "log")
    # the length report comes before any step of every attempt; the training metrics continue the run's steps
    steps = sorted({e["step"] for e in events if e["event"] == "metric" and not e["name"].startswith("length/")})
    assert steps == [stopped_at + 1, stopped_at + 2], [e for e in events if e.get("step") == stopped_at]
    metrics = events[-1]["metrics"]
    assert metrics["steps"] == stopped_at + 2
    # this attempt ran 2 steps: its time per step is over those, not over the run's stopped_at + 2
    assert metrics["seconds_per_step"] == pytest.approx(metrics["seconds"] / 2, abs=0.06)


@pytest.mark.slow
def test_grpo_runs_under_accelerate_launch_with_one_process(tmp_path):
    spec = spec_file(tmp_path, "grpo", max_steps=2, eval_interval=0, checkpoint_interval=0)
    launched = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--cpu", "-m", "trainer", "grpo",
         "--spec", str(spec)],
        cwd=REPO_ROOT, capture_output=True, text=True, env=OFFLINE, timeout=300,
    )  # fmt: skip
    events = events_in(launched.stdout)
    assert launched.returncode == 0, launched.stderr[-2000:]
    assert events[-1]["event"] == "done" and events[-1]["metrics"]["steps"] == 2


# --- Several processes: only the main one evaluates, writes and reports ------------------------


class Exploding:
    tasks: list = []

    def evaluate(self, model):
        raise AssertionError("a process other than the main one evaluated the held-out tasks")


def test_a_process_other_than_the_main_one_trains_silently(tmp_path, capfd, monkeypatch):
    from trainer.callbacks import ManifestInfo, ProtocolCallback
    from trainer.contracts import LogEvent
    from trainer.jobs import protocol_stdout

    monkeypatch.setenv("RANK", "1")
    with protocol_stdout() as events:
        events.emit(LogEvent("seen by nobody"))
        callback = ProtocolCallback(events, None, ManifestInfo("base", "sha", {}), heldout=Exploding())
        callback.bind(object())
        callback.evaluate_heldout(0)
        checkpoint = tmp_path / CHECKPOINTS / "checkpoint-2"
        checkpoint.mkdir(parents=True)
        (checkpoint / WEIGHTS_FILE).write_bytes(b"weights")
        callback.save(2, str(tmp_path))
    assert capfd.readouterr().out == ""
    assert not (checkpoint / MANIFEST_FILE).exists()


def test_the_main_process_reports_and_writes_the_manifest(tmp_path, capfd, monkeypatch):
    from trainer.callbacks import ManifestInfo, ProtocolCallback
    from trainer.jobs import protocol_stdout

    monkeypatch.delenv("RANK", raising=False)
    checkpoint = tmp_path / CHECKPOINTS / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / WEIGHTS_FILE).write_bytes(b"weights")
    (checkpoint / "adapter_config.json").write_text("{}")
    with protocol_stdout() as events:
        ProtocolCallback(events, None, ManifestInfo("base", "sha", {})).save(2, str(tmp_path))
    assert json.loads(capfd.readouterr().out)["event"] == "checkpoint"
    assert (checkpoint / MANIFEST_FILE).is_file()


def test_sft_skips_bad_train_and_held_out_lines_and_reports_both(tmp_path, capfd):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(TINY_TASKS.read_text() + '{"id": "torn", "messages": [\n')
    code, events = run_in_process("sft", spec_file(tmp_path, "sft", task_paths=[str(tasks)],
                                                   heldout_paths=[str(tasks)], num_train_epochs=1), capfd)
    assert code == 0, events[-1]
    warnings = [e["message"] for e in events if e["event"] == "log" and e["level"] == "warning"]
    assert any(m.startswith("skipped 1 bad train task line(s)") and "tasks.jsonl:6: invalid JSON" in m
               for m in warnings)
    assert any(m.startswith("skipped 1 bad held-out task line(s)") and "tasks.jsonl:6" in m for m in warnings)
    assert events[-1]["metrics"]["skipped_tasks"]["count"] == 2
