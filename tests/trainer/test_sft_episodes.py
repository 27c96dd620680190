"""The `sft` job on whole episodes (`max_turns` above 1) on the tiny model, with the example order desk."""

from __future__ import annotations

import dataclasses
import json

from tests.trainer.test_demonstrations import looked_up
from tests.trainer.test_training import assert_only_lora_changed, run_in_process, spec_file, spy_on_final_model
from tests.trainer.tiny_model import REPO_ROOT, TINY_MODEL
from trainer import sft
from trainer.models import load_tokenizer
from trainer.prompts import CLOSING_TEXT, format_tool_calls, reference_calls

ORDER_TASKS = REPO_ROOT / "trainer" / "examples" / "orders_tasks.jsonl"
EPISODES = {"environment": "trainer.examples.orders:environment", "max_turns": 4, "max_steps": 2,
            "per_device_train_batch_size": 2, "heldout_sample_size": 2, "eval_max_new_tokens": 24,
            "max_length": None}  # fmt: skip


def spy_on_datasets(monkeypatch) -> list:
    seen = []

    class Recording(sft.SFTTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(self.train_dataset)

    monkeypatch.setattr(sft, "SFTTrainer", Recording)
    return seen


def test_sft_on_episodes_trains_on_every_answer_of_the_reference_episodes(tmp_path, capfd, monkeypatch):
    tasks = tmp_path / "orders.jsonl"
    tasks.write_text(looked_up().to_json_line() + "\n" + ORDER_TASKS.read_text())
    datasets, trained = spy_on_datasets(monkeypatch), spy_on_final_model(monkeypatch)
    spec = spec_file(tmp_path, "sft", task_paths=[str(tasks)], heldout_paths=[str(ORDER_TASKS)], **EPISODES)
    code, events = run_in_process("sft", spec, capfd)
    assert code == 0, events[-1]
    logs = [e["message"] for e in events if e["event"] == "log"]
    assert any(m.startswith("SFT on 7 reference episodes") for m in logs), logs
    assert any(m.startswith("max_length ") and "(derived from the train tasks) cuts 0 of 7 reference episodes" in m
               for m in logs), logs
    # The first example is the looked-up episode: TRL's labels keep exactly its four answers.
    first = datasets[0][0]
    tokenizer = load_tokenizer(str(TINY_MODEL))
    learned = tokenizer.decode([token for token, label in zip(first["input_ids"], first["labels"], strict=True)
                                if label != -100])
    answers = [format_tool_calls([call]) for call in reference_calls(looked_up())] + [CLOSING_TEXT]
    assert learned == "".join(answer + "<|im_end|>" for answer in answers)
    assert '"order_ids": ["A-1001", "A-1003"]' in tokenizer.decode(first["input_ids"])
    # The held-out tasks were played as episodes in the desk, at the start and at the end.
    held_out = {e["step"] for e in events if e["event"] == "metric" and e["name"] == "heldout/execution_success_rate"}
    assert held_out == {0, 2}
    assert_only_lora_changed(trained["model"])


def test_refused_reference_calls_and_failing_reference_episodes_are_logged(tmp_path, capfd):
    task = looked_up()
    cancel = dataclasses.replace(task.expected_calls[2], name="cancel_order")  # A-1003 is delivered: refused
    wrong = dataclasses.replace(task, expected_calls=[*task.expected_calls[:2], cancel])
    tasks = tmp_path / "orders.jsonl"
    tasks.write_text(json.dumps(wrong.to_json()) + "\n" + ORDER_TASKS.read_text())
    spec = spec_file(tmp_path, "sft", task_paths=[str(tasks)], **{**EPISODES, "max_steps": 1, "max_turns": 2})
    code, events = run_in_process("sft", spec, capfd)
    assert code == 0, events[-1]
    warnings = [e["message"] for e in events if e["event"] == "log" and e["level"] == "warning"]
    assert "the environment refused 1 reference call(s); they are trained on as the reference makes them" in warnings
    assert "1 reference episodes take more turns than max_turns (2): evaluation stops them sooner" in warnings


def test_an_episode_length_limit_that_cuts_too_many_episodes_is_refused_before_any_step(tmp_path, capfd):
    limits = {"max_length": 900, "max_truncated_share": 0.5}
    spec = spec_file(tmp_path, "sft", task_paths=[str(ORDER_TASKS)], **{**EPISODES, **limits})
    code, events = run_in_process("sft", spec, capfd)
    assert code != 0 and events[-1]["event"] == "error"
    assert "max_length 900 would cut 6 of 6 reference episodes" in events[-1]["message"]
    assert not any(e["event"] == "metric" and e["name"] == "loss" for e in events)
