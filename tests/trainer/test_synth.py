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
from trainer.spec.workbench import tools_by_domain

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

    def __init__(self, rewrites: list[str] = REWRITES) -> None:
        self.rewrites = rewrites
        self.backend = self
        self.prompts: list[str] = []
        self.sampling: SamplingConfig | None = None

    def render(self, task) -> str:
        return json.dumps(task.messages)

    def generate(self, prompts, sampling: SamplingConfig, hooks: GenerationHooks | None = None):
        self.prompts, self.sampling = list(prompts), sampling
        return [[Generation(text, 10, 8, True, 0.01) for text in self.rewrites] for _ in prompts]


def write_spec(folder: Path, seeds: list[Task] = [SEED], **hyperparameters: Any) -> Path:  # noqa: B006 - read only
    write_tasks(folder / "train.jsonl", seeds)
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


EXTERNAL = Path(__file__).resolve().parents[3] / "shared" / "external"


def delete_event(event_id: str) -> Task:
    tools = tools_by_domain(EXTERNAL / "nemo_gym" / "workplace_assistant" / "example.jsonl")["calendar"]
    return Task(id=f"delete-{event_id}", messages=[{"role": "user", "content": f"Delete event {event_id}."}],
                tools=tools, expected_calls=[ExpectedCall.exact("calendar_delete_event", {"event_id": event_id})])


def test_the_rewrites_are_played_in_the_configs_environment(tmp_path, capfd, monkeypatch):
    """A seed whose call acts on a row the sandbox lacks: every rewrite of it is rejected by the environment."""
    monkeypatch.setenv("FLYWHEEL_WORKBENCH_DIR", str(EXTERNAL / "workbench"))
    runtime = ScriptedRuntime(["Please remove event 00000013 from my calendar.",
                               "Please remove event 99999999 from my calendar."])  # fmt: skip
    monkeypatch.setattr(synth, "open_runtime", lambda *args, **kwargs: runtime)
    seeds = [delete_event("00000013"), delete_event("99999999")]
    code, events = run_synth(write_spec(tmp_path, seeds, environment="workbench"), capfd)
    assert code == 0, events[-1]
    lines = [json.loads(text) for text in Path(events[-1]["results"]).read_text().splitlines()]
    verdicts = {line["task"]["id"]: (line["rejected_by"], line["reason"]) for line in lines}
    assert verdicts["delete-00000013~model_paraphrase1"] == ("", "")
    assert verdicts["delete-99999999~model_paraphrase2"] == (
        "environment", "call 1, calendar_delete_event, fails in workbench: Event not found.")
    done = events[-1]["metrics"]
    assert done["rejected"]["environment"] == 1 and done["environment"]["applied"] is True
    metric_names = {event["name"] for event in events if event["event"] == "metric"}
    assert "rejected/environment" in metric_names


def test_an_environment_that_cannot_judge_variants_is_reported_not_applied(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(synth, "open_runtime", lambda *args, **kwargs: ScriptedRuntime())
    code, events = run_synth(write_spec(tmp_path, environment="replay"), capfd)
    assert code == 0, events[-1]
    done = events[-1]["metrics"]
    assert done["environment"]["applied"] is False and "replay cannot judge variants" in done["environment"]["skipped"]
    assert "environment" not in done["rejected"]


def test_a_missing_sandbox_fails_before_any_model_loads(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_WORKBENCH_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setattr(synth, "open_runtime", lambda *args, **kwargs: pytest.fail("no model may load"))
    code, events = run_synth(write_spec(tmp_path, environment="workbench"), capfd)
    assert code == EXIT_FAILED and "nowhere" in events[-1]["message"]
