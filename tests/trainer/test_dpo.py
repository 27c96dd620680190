"""The `dpo` job on the tiny model: protocol events, a loadable adapter, learning the preference, length refusals."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch

from tests.trainer.tiny_model import FIXTURES, TINY_MODEL, TINY_TASKS, tiny_model
from trainer import dpo
from trainer.contracts import DoneEvent
from trainer.jobs import EventStream, StopFlag, load_spec
from trainer.prompts import render_conversation, render_prompt
from trainer.spec.adapters import MANIFEST_FILE, verify_adapter
from trainer.spec.config import SpecError
from trainer.spec.pairs import PreferencePair, read_pair_files

PAIRS = FIXTURES / "preference_pairs.jsonl"
# Every pair in each step, no warm-up: a few steps on the tiny model are enough to move the preference.
QUICK = {"max_steps": 6, "learning_rate": 5e-3, "per_device_train_batch_size": 5, "warmup_ratio": 0.0,
         "checkpoint_interval": 3, "eval_interval": 3, "heldout_sample_size": 1, "eval_max_new_tokens": 16,
         "max_truncated_share": 1.0, "device": "cpu"}  # fmt: skip


def dpo_spec(folder: Path, pairs: Path = PAIRS, adapter: str | None = None, **hyperparameters) -> Path:
    spec = {"kind": "dpo", "base_model": str(TINY_MODEL), "task_paths": [str(pairs)],
            "heldout_paths": [str(TINY_TASKS)], "output_dir": str(folder / "out"), "adapter": adapter, "seed": 0,
            "hyperparameters": {**QUICK, **hyperparameters}}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.json"
    path.write_text(json.dumps(spec))
    return path


def run_dpo(spec: Path) -> tuple[DoneEvent | None, list[dict], str]:
    """The job's done event (None when it failed), its events, and the failure's message."""
    out = io.StringIO()
    try:
        done = dpo.run(load_spec(spec, "dpo"), EventStream(out), StopFlag())
    except SpecError as error:
        return None, [json.loads(line) for line in out.getvalue().splitlines()], str(error)
    return done, [json.loads(line) for line in out.getvalue().splitlines()], ""


def metric(events: list[dict], name: str) -> list[tuple[int, float]]:
    return [(e["step"], e["value"]) for e in events if e["event"] == "metric" and e["name"] == name]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[DoneEvent, list[dict]]:
    done, events, failure = run_dpo(dpo_spec(tmp_path_factory.mktemp("dpo")))
    assert done is not None, failure
    return done, events


def answer_log_prob(model, tokenizer, pair: PreferencePair, answer: dict) -> float:
    """log p(answer | prompt) summed over the answer's tokens, the answer rendered as the next turn.

    Rendered here with `trainer.prompts` alone (not `trainer.dpo`), so a DPO that mixed up the answers
    cannot make this agree with it.
    """
    task = pair.prompt_task()
    prompt = render_prompt(task, tokenizer)
    whole = render_conversation(dataclasses.replace(task, messages=[*pair.prompt, answer]), tokenizer).rstrip()
    assert whole.startswith(prompt)
    prompt_ids = tokenizer(prompt)["input_ids"]
    ids = tokenizer(whole)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
    targets = torch.tensor(ids[1:])
    per_token = logits.gather(1, targets[:, None])[:, 0]
    return float(per_token[len(prompt_ids) - 1:].sum())


def preference(model, tokenizer, pairs: list[PreferencePair]) -> list[float]:
    """Per pair: log p(chosen) - log p(rejected) under `model`."""
    return [answer_log_prob(model, tokenizer, pair, pair.chosen)
            - answer_log_prob(model, tokenizer, pair, pair.rejected) for pair in pairs]


# --- A run: events, checkpoints, the adapter -------------------------------------------------------------


@pytest.mark.slow
def test_a_dpo_run_reports_the_implicit_rewards_held_out_metrics_and_checkpoints(trained):
    done, events = trained
    assert {"loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies",
            "logps/chosen", "logps/rejected"} <= {e["name"] for e in events if e["event"] == "metric"}
    assert {step for step, _ in metric(events, "heldout/correct_arguments_rate")} == {0, 3, 6}
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [3, 6]
    assert all((Path(e["path"]) / MANIFEST_FILE).is_file() for e in events if e["event"] == "checkpoint")
    assert done.metrics["steps"] == 6 and "heldout/correct_arguments_rate" in done.metrics
    assert "train/rewards/margins" in done.metrics
    summary = [e["message"] for e in events if e["event"] == "log" and e["message"].startswith("DPO on")]
    assert summary == ["DPO on 5 preference pairs (sigmoid loss, beta 0.1; reference: the base model) for 3 epoch(s) "
                       "on cpu"]


@pytest.mark.slow
def test_a_dpo_run_writes_a_peft_adapter_with_its_manifest(trained):
    from peft import PeftModel

    done, _ = trained
    folder = Path(done.files["adapter_dir"])
    manifest = verify_adapter(folder)
    assert manifest.config["kind"] == "dpo" and manifest.config["beta"] == 0.1
    assert manifest.base_model == str(TINY_MODEL) and manifest.snapshot_sha256
    assert not (folder / "ref").exists()
    loaded = PeftModel.from_pretrained(tiny_model().model, str(folder))
    assert any(p.abs().sum() > 0 for name, p in loaded.named_parameters() if "lora_B" in name)


@pytest.mark.slow
def test_after_a_few_steps_the_adapter_prefers_the_chosen_answers_more_than_the_base_does(trained):
    # The implicit reward margin, measured outside TRL: how much more the adapter raised log p(chosen) than
    # log p(rejected) over the base model. Fails if the pairs were trained the other way round.
    from peft import PeftModel

    done, events = trained
    base = tiny_model()
    pairs = read_pair_files([str(PAIRS)], strict=True).pairs
    before = preference(base.model, base.tokenizer, pairs)
    adapted = PeftModel.from_pretrained(tiny_model().model, done.files["adapter_dir"]).eval()
    after = preference(adapted, base.tokenizer, pairs)
    margins = [now - then for now, then in zip(after, before, strict=True)]
    assert sum(margins) / len(margins) > 0.5
    assert sum(1 for margin in margins if margin > 0) >= 4
    assert metric(events, "rewards/margins")[-1][1] > 0


@pytest.mark.slow
def test_from_a_parent_adapter_the_reference_is_the_parent(trained, tmp_path):
    # At the first step the policy is the parent: its implicit rewards are zero only when the parent, not the
    # base model, scores the reference (the parent here is the trained adapter, far from the base).
    done, _ = trained
    spec = dpo_spec(tmp_path, adapter=done.files["adapter_dir"], max_steps=1, eval_interval=0, checkpoint_interval=0)
    child, events, failure = run_dpo(spec)
    assert child is not None, failure
    assert metric(events, "rewards/chosen") == [(1, 0.0)] and metric(events, "rewards/rejected") == [(1, 0.0)]
    assert any("reference: the parent adapter" in e.get("message", "") for e in events)
    folder = Path(child.files["adapter_dir"])
    verify_adapter(folder)
    assert not (folder / "ref").exists()  # the frozen reference copy is not part of the trained adapter


# --- Rendering: our prompt format, not TRL's chat-template path ----------------------------------------


def test_a_pair_is_rendered_in_the_prompt_format_evaluation_and_serving_use():
    tokenizer = tiny_model().tokenizer
    pairs = {pair.id: pair for pair in read_pair_files([str(PAIRS)], strict=True).pairs}
    refund = dpo.render_pair(pairs["pair-refund"], tokenizer)
    assert refund.prompt == render_prompt(pairs["pair-refund"].prompt_task(), tokenizer)
    # The call in the history and its result are written as the prompt format writes them.
    assert '<tool_call>{"name": "find_order", "arguments": {"email": "ana@example.com"}}</tool_call>' in refund.prompt
    assert "<tool_response>\n{\"order_id\": \"A-17\"}\n</tool_response>" in refund.prompt
    assert refund.chosen == ('<tool_call>{"name": "refund_order", "arguments": {"order_id": "A-17"}}</tool_call>'
                             "<|im_end|>")
    assert refund.rejected.startswith('<tool_call>{"name": "find_order"')
    # Arguments given as JSON text render as the same call as arguments given as an object.
    factorial = dpo.render_pair(pairs["pair-factorial"], tokenizer)
    assert factorial.chosen == '<tool_call>{"name": "math.factorial", "arguments": {"number": 5}}</tool_call><|im_end|>'
    assert factorial.rejected == "The factorial of 5 is 120.<|im_end|>"


# --- Length limits: cut answers are refused before any step ---------------------------------------------


def long_rejected_pairs(folder: Path) -> Path:
    """The fixture pairs, the first one's rejected answer made far longer than any chosen one."""
    lines = PAIRS.read_text().splitlines()
    first = json.loads(lines[0])
    first["rejected"] = [{"role": "assistant", "content": "I am not sure. " * 80}]
    path = folder / "pairs.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    return path


def test_a_max_length_that_cuts_a_rejected_answer_is_refused_naming_the_length_needed(tmp_path):
    pairs = long_rejected_pairs(tmp_path)
    # 700 holds every prompt with its chosen answer (the longest is 621 tokens); only one rejected answer is longer.
    done, events, failure = run_dpo(dpo_spec(tmp_path, pairs, max_length=700, max_truncated_share=0.0))
    assert done is None
    assert failure.startswith("max_length 700 would cut 1 of 10 prompts with their chosen or rejected answer")
    assert "set max_length to at least" in failure
    assert metric(events, "length/max_length/cut_share") == [(0, 0.1)]


def test_a_dpo_job_without_a_usable_pair_is_refused(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"id": "a", "prompt": [{"role": "user", "content": "hi"}], "chosen": [], "rejected": []}\n')
    done, _, failure = run_dpo(dpo_spec(tmp_path, path))
    assert done is None and failure.startswith("no usable preference pair in")
    assert "'chosen' must be a list holding one assistant message" in failure


# --- Flags: the preference accuracy is the training reward ----------------------------------------------


def test_the_reward_hacking_flag_watches_the_preference_accuracy_against_the_held_out_metric():
    from trainer.callbacks import ManifestInfo

    events = io.StringIO()
    callback = dpo.DpoCallback(EventStream(events), StopFlag(), ManifestInfo("tiny", "hash", {}))
    first = {f"task-{number}": 1.0 for number in range(10)}
    assert callback.flags.heldout(0, first) is None
    for step, accuracy in enumerate([0.2] * 5 + [1.0] * 5, start=1):
        callback.log(step, {"loss": 0.5, "rewards/accuracies": accuracy})
    flagged = callback.flags.heldout(10, {task: 0.0 for task in first})
    assert flagged is not None and flagged.message.startswith("flag: reward_hacking at step 10 training reward rose")
    assert '"name": "rewards/accuracies", "value": 1.0' in events.getvalue()
