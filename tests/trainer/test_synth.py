"""The `synth` job: a model's rewrites of seed requests become variants, screened by the same filters.

The filters and counts run in-process with a scripted backend (so the rewrites are known), and once
end to end on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.tiny_model import TINY_MODEL
from trainer import synth
from trainer.contracts import ExpectedCall, Task
from trainer.jobs import EXIT_FAILED, run_job
from trainer.rollout import Generation, GenerationHooks
from trainer.spec.eval import SamplingConfig
from trainer.spec.synth import METHOD, model_variants, read_paraphrase
from trainer.spec.tasks import write_tasks

FACTORIAL = {"type": "function", "function": {"name": "math.factorial", "parameters": {
    "type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]}}}  # fmt: skip
SEED = Task(id="fact", messages=[{"role": "user", "content": "Calculate the factorial of 5."}], tools=[FACTORIAL],
            expected_calls=[ExpectedCall.exact("math.factorial", {"number": 5})])  # fmt: skip
HELD = Task(id="held", messages=[{"role": "user", "content": "What is 5 factorial? Compute it for me please."}],
            tools=[FACTORIAL], expected_calls=[ExpectedCall.exact("math.factorial", {"number": 5})])  # fmt: skip
REWRITES = [
    "Rewritten request: Work out 5 factorial for me.",  # kept
    "Compute the factorial of five.",  # drops the value as written: values_kept
    "Rewritten request: Work out 5 factorial for me!",  # the first again, near enough: near_duplicate
    "What is 5 factorial? Compute it for me.",  # close to the held-out request
]


class ScriptedRuntime:
    description = "scripted"

    def __init__(self) -> None:
        self.backend = self
        self.prompts: list[str] = []
        self.sampling: SamplingConfig | None = None

    def render(self, task) -> str:
        return json.dumps(task.messages)

    def generate(self, prompts, sampling: SamplingConfig, hooks: GenerationHooks | None = None):
        self.prompts, self.sampling = list(prompts), sampling
        return [[Generation(text, 10, 8, True, 0.01) for text in REWRITES] for _ in prompts]


def write_spec(folder: Path, **hyperparameters: Any) -> Path:
    write_tasks(folder / "train.jsonl", [SEED])
    write_tasks(folder / "heldout.jsonl", [HELD])
    spec = {"kind": "synth", "base_model": str(TINY_MODEL), "task_paths": [str(folder / "train.jsonl")],
            "heldout_paths": [str(folder / "heldout.jsonl")], "output_dir": str(folder / "out"), "seed": 3,
            "hyperparameters": {"paraphrases": 4, **hyperparameters}}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(spec))
    return folder / "run.json"


def run_synth(spec: Path, capfd) -> tuple[int, list[dict[str, Any]]]:
    code = run_job(spec, "synth", synth.run)
    return code, [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.strip()]


def test_the_models_rewrites_are_screened_and_counted(tmp_path, capfd, monkeypatch):
    runtime = ScriptedRuntime()
    monkeypatch.setattr(synth, "open_runtime", lambda *args, **kwargs: runtime)
    code, events = run_synth(write_spec(tmp_path), capfd)
    assert code == 0, events[-1]
    assert "Calculate the factorial of 5." in runtime.prompts[0] and "Rewrite" in runtime.prompts[0]
    assert runtime.sampling.num_samples == 4 and runtime.sampling.seed == 3
    lines = [json.loads(text) for text in Path(events[-1]["results"]).read_text().splitlines()]
    verdicts = [(line["task"]["messages"][0]["content"], line["rejected_by"]) for line in lines]
    assert verdicts == [
        ("Work out 5 factorial for me.", ""),
        ("Compute the factorial of five.", "values_kept"),
        ("Work out 5 factorial for me!", "near_duplicate"),
        ("What is 5 factorial? Compute it for me.", "heldout_near_duplicate"),
    ]
    assert all(line["method"] == METHOD and line["seed_id"] == "fact" for line in lines)
    assert lines[0]["task"]["expected_calls"] == [{"name": "math.factorial", "arguments": {"number": [5]}}]
    done = events[-1]["metrics"]
    assert (done["generated"], done["accepted"], done["rejected"]["values_kept"]) == (4, 1, 1)


def test_bad_hyperparameters_fail_before_any_model_loads(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(synth, "open_runtime", lambda *args, **kwargs: pytest.fail("no model may load"))
    code, events = run_synth(write_spec(tmp_path, verifier="vibes"), capfd)
    assert code == EXIT_FAILED and events[-1]["event"] == "error" and "vibes" in events[-1]["message"]


def test_a_rewrite_is_read_from_its_first_line_without_lead_in_or_quotes():
    assert read_paraphrase('\n  Rewritten request: "Work out 5!"\nExplanation: ...') == "Work out 5!"
    assert model_variants([SEED], [["Calculate the factorial of 5.", "", "Do 5 factorial."]])[0].task.id == (
        f"fact~{METHOD}1"
    )
    assert len(model_variants([SEED], [["Calculate the factorial of 5.", "", "Do 5 factorial."]])) == 1


@pytest.mark.slow
def test_a_synth_job_runs_end_to_end_on_the_tiny_model(tmp_path, capfd):
    code, events = run_synth(write_spec(tmp_path, device="cpu", max_new_tokens=8, paraphrases=2), capfd)
    assert code == 0, events[-1]
    done = events[-1]["metrics"]
    lines = Path(events[-1]["results"]).read_text().splitlines()
    assert done["generated"] == len(lines) and done["accepted"] + sum(done["rejected"].values()) == len(lines)
