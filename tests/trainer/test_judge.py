"""The `judge` job: each item shown to the judge with the rubric, each reply read, written and reported.

One run is in-process with a scripted backend (so the replies are known), one on the tiny model end to end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.tiny_model import TINY_MODEL
from trainer import judge
from trainer.jobs import EXIT_FAILED, run_job
from trainer.rollout import Generation, GenerationHooks
from trainer.spec.eval import SamplingConfig

RUBRIC = {"criteria": "Looks the order up.", "pass_means": "find_order was called.", "scale_max": 10,
          "pass_score": 0.5}  # fmt: skip
ITEMS = [
    {"id": "good", "messages": [{"role": "user", "content": "Where is order 17?"}], "answer": "find_order(17)"},
    {"id": "bad", "messages": [{"role": "user", "content": "Where is order 18?"}], "answer": "No idea."},
    {"id": "mute", "messages": [{"role": "user", "content": "Where is order 19?"}], "answer": "Hmm."},
]
REPLIES = {"good": " 9\nReason: looked it up", "bad": " 2\nReason: no lookup", "mute": " I cannot say"}


class Tokenizer:
    def apply_chat_template(self, chat, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        return "|".join(f"{turn['role']}:{turn['content']}" for turn in chat) + "|assistant:"


class ScriptedRuntime:
    description = "scripted"

    def __init__(self) -> None:
        self.backend, self.tokenizer = self, Tokenizer()
        self.prompts: list[str] = []
        self.sampling: SamplingConfig | None = None

    def generate(self, prompts, sampling: SamplingConfig, hooks: GenerationHooks | None = None):
        self.prompts, self.sampling = list(prompts), sampling
        replies = []
        for number, prompt in enumerate(prompts, start=1):
            item_id = next(item["id"] for item in ITEMS if item["messages"][0]["content"] in prompt)
            replies.append([Generation(REPLIES[item_id], 50, 8, True, 0.01)])
            hooks.on_progress(number, len(prompts))
        return replies


def write_spec(folder: Path, items: list[dict[str, Any]], **hyperparameters: Any) -> Path:
    (folder / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    spec = {"kind": "judge", "base_model": str(TINY_MODEL), "task_paths": ["items.jsonl"], "output_dir": "out",
            "seed": 3, "hyperparameters": hyperparameters}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(spec))
    return folder / "run.json"


def run_judge(spec: Path, capfd) -> tuple[int, list[dict[str, Any]]]:
    code = run_job(spec, "judge", judge.run)
    return code, [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.strip()]


def test_each_item_is_judged_with_the_rubric_and_its_reply_read(tmp_path, capfd, monkeypatch):
    runtime = ScriptedRuntime()
    monkeypatch.setattr(judge, "open_runtime", lambda *args, **kwargs: runtime)
    code, events = run_judge(write_spec(tmp_path, ITEMS, rubric=RUBRIC, batch_size=2), capfd)
    assert code == 0, events[-1]
    assert all(prompt.endswith("|assistant:Score:") and "Looks the order up." in prompt for prompt in runtime.prompts)
    assert runtime.sampling.greedy and runtime.sampling.batch_size == 2 and runtime.sampling.seed == 3
    done = events[-1]
    lines = [json.loads(text) for text in Path(done["results"]).read_text().splitlines()]
    assert [(line["id"], line["score"], line["passed"]) for line in lines] == [
        ("good", 0.9, True), ("bad", 0.2, False), ("mute", None, None)]  # fmt: skip
    assert lines[0]["reason"] == "looked it up" and lines[0]["raw"] == "Score: 9\nReason: looked it up"
    assert lines[2]["reason"].startswith("unreadable reply")
    assert done["metrics"] == {"items": 3, "scored": 2, "unreadable": 1, "passed": 1, "mean_score": 0.55}
    progress = [event["value"] for event in events if event["event"] == "metric" and event["name"] == "judged"]
    assert progress == [1.0, 2.0, 3.0]
    assert any(event["event"] == "log" and event["level"] == "warning" for event in events)


def test_a_bad_rubric_fails_the_job_before_any_model_loads(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(judge, "open_runtime", lambda *args, **kwargs: pytest.fail("no model may load"))
    code, events = run_judge(write_spec(tmp_path, ITEMS, rubric={"criteria": "c"}), capfd)
    assert code == EXIT_FAILED and events[-1]["event"] == "error" and events[-1]["kind"] == "bad_spec"


@pytest.mark.slow
def test_a_judge_runs_end_to_end_on_the_tiny_model(tmp_path, capfd):
    code, events = run_judge(write_spec(tmp_path, ITEMS[:2], device="cpu", max_new_tokens=6), capfd)
    assert code == 0, events[-1]
    lines = [json.loads(text) for text in Path(events[-1]["results"]).read_text().splitlines()]
    assert [line["id"] for line in lines] == ["good", "bad"]
    for line in lines:  # the tiny model's words are noise: what matters is that each reply is read, not guessed
        assert line["raw"].startswith("Score:") and line["reason"]
        assert (line["score"] is None) == (line["passed"] is None)


def test_grpo_takes_the_judge_as_its_reward_only_with_its_judge():
    # The reward itself is tested with GRPO (tests/trainer/test_grpo.py, test_training.py).
    from trainer.spec.config import SpecError, config_from_json
    from trainer.spec.grpo import GrpoConfig

    config = config_from_json(GrpoConfig, {"reward": "judge", "judge_model": str(TINY_MODEL)}, "grpo")
    assert (config.reward, config.parsed_judge_rubric().scale_max) == ("judge", 10)
    with pytest.raises(SpecError, match="unknown reward"):
        config_from_json(GrpoConfig, {"reward": "vibes"}, "grpo")
