"""The `mine` job (hard-task mining): which train tasks it keeps, what it writes, what it refuses.

Most cases run the job in-process with a scripted generation backend in place of a model, so that
each task's solves of k are known exactly; one runs it on the tiny model end to end.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.tiny_model import TINY_MODEL, tiny_tasks
from trainer import mine
from trainer.contracts import ExpectedCall, Task, TaskMetadata
from trainer.environments.base import Judgement
from trainer.jobs import EXIT_FAILED, EXIT_STOPPED, run_job
from trainer.rollout import Generation, GenerationHooks
from trainer.spec.eval import SamplingConfig
from trainer.verifiers import get_verifier

K = 8
# Of its 8 samples, task A is solved 3 times, B every time, C never.
SOLVES = {"book_A": 3, "book_B": 8, "book_C": 0}


def task(task_id: str, split: str = "train") -> Task:
    tool = {"type": "function", "function": {"name": f"tool_{task_id}", "description": "do it", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}
    return Task(id=task_id, messages=[{"role": "user", "content": f"please do {task_id} with x=1"}], tools=[tool],
                expected_calls=[ExpectedCall.exact(f"tool_{task_id}", {"x": 1})],
                metadata=TaskMetadata(source="test", split=split))  # fmt: skip


def right_answer(task_id: str) -> str:
    return json.dumps({"name": f"tool_{task_id}", "arguments": {"x": 1}})


class ScriptedBackend:
    """Answers prompt `<task id>` with SOLVES[id] right answers, then wrong ones; records each call."""

    name = "scripted"

    def __init__(self, on_generate: Any = None) -> None:
        self.calls: list[tuple[list[str], SamplingConfig]] = []
        self.on_generate = on_generate

    def generate(self, prompts, sampling: SamplingConfig, hooks: GenerationHooks | None = None):
        self.calls.append((list(prompts), sampling))
        if self.on_generate:
            self.on_generate()
        return [[Generation(right_answer(prompt) if index < SOLVES[prompt] else "I cannot help with that.",
                            10, 5, True, 0.01) for index in range(sampling.num_samples)]
                for prompt in prompts]  # fmt: skip


class ScriptedRuntime:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend
        self.description = "scripted"

    def render(self, task: Task) -> str:
        return task.id


@pytest.fixture
def backend(monkeypatch) -> ScriptedBackend:
    scripted = ScriptedBackend()
    monkeypatch.setattr(mine, "open_runtime", lambda *args, **kwargs: ScriptedRuntime(scripted))
    return scripted


def write_mine_spec(folder: Path, tasks: list[Task] | None = None, **fields: Any) -> Path:
    tasks_path = folder / "train.jsonl"
    tasks_path.write_text("".join(t.to_json_line() + "\n" for t in tasks or [task(i) for i in SOLVES]))
    spec = {"kind": "mine", "base_model": "scripted", "task_paths": [str(tasks_path)],
            "output_dir": str(folder / "out"), "seed": 7, "hyperparameters": {"samples": K}}  # fmt: skip
    spec["hyperparameters"].update(fields.pop("hyperparameters", {}))
    spec.update(fields)
    path = folder / "run.json"
    path.write_text(json.dumps(spec))
    return path


def run_mine(spec: Path, capfd) -> tuple[int, list[dict[str, Any]]]:
    code = run_job(spec, "mine", mine.run)
    return code, [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.strip()]


def test_it_keeps_only_the_task_solved_sometimes_and_writes_it_byte_for_byte(tmp_path, capfd, backend):
    code, events = run_mine(write_mine_spec(tmp_path), capfd)
    assert code == 0, events[-1]
    done = events[-1]
    assert done["event"] == "done"
    assert Path(done["files"]["mined"]).read_text() == task("book_A").to_json_line() + "\n"
    rates = [json.loads(line) for line in Path(done["files"]["pass_rates"]).read_text().splitlines()]
    assert [(rate["task_id"], rate["solved"], rate["samples"], rate["kept"]) for rate in rates] == [
        ("book_A", 3, K, True), ("book_B", 8, K, False), ("book_C", 0, K, False)]
    metrics = done["metrics"]
    assert (metrics["tasks"], metrics["kept"], metrics["all_solved"], metrics["none_solved"]) == (3, 1, 1, 1)
    assert metrics["mean_pass_rate"] == pytest.approx(11 / 24, abs=1e-6)
    assert metrics["histogram"] == {"0": 1, "1": 0, "2": 0, "3": 1, "4": 0, "5": 0, "6": 0, "7": 0, "8": 1}
    reported = {event["name"]: event["value"] for event in events if event["event"] == "metric"}
    assert reported == {"tasks": 3.0, "kept": 1.0, "all_solved": 1.0, "none_solved": 1.0,
                        "mean_pass_rate": pytest.approx(11 / 24, abs=1e-6)}  # fmt: skip
    samples = [event for event in events if event["event"] == "sample"]
    shown = [(sample["task_id"], sample["completion"], sample["reward"]) for sample in samples]
    assert shown == [("book_A", right_answer("book_A"), 3 / 8)]


def test_it_samples_every_task_k_times_in_one_seeded_pass(tmp_path, capfd, backend):
    code, _ = run_mine(write_mine_spec(tmp_path, hyperparameters={"temperature": 0.7}), capfd)
    assert code == 0
    [(prompts, sampling)] = backend.calls
    assert prompts == list(SOLVES)
    assert (sampling.num_samples, sampling.seed, sampling.temperature) == (K, 7, 0.7)


@pytest.mark.parametrize(("bounds", "kept"), [
    ({"min_solved": 0}, ["book_A", "book_C"]),
    ({"max_solved": 8}, ["book_A", "book_B"]),
    ({"min_solved": 4, "max_solved": 7}, []),
])  # fmt: skip
def test_the_bounds_decide_which_tasks_are_kept(tmp_path, capfd, backend, bounds, kept):
    code, events = run_mine(write_mine_spec(tmp_path, hyperparameters=bounds), capfd)
    assert code == 0
    lines = Path(events[-1]["files"]["mined"]).read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == kept
    assert events[-1]["metrics"]["kept"] == len(kept)


def test_a_sample_is_drawn_with_the_seed_from_the_train_tasks(tmp_path, capfd, backend):
    code, events = run_mine(write_mine_spec(tmp_path, hyperparameters={"sample_size": 2}), capfd)
    assert code == 0
    [(prompts, _)] = backend.calls
    assert len(prompts) == 2 and set(prompts) <= set(SOLVES) and events[-1]["metrics"]["tasks"] == 2


def test_the_agents_safety_policy_from_the_spec_decides_a_solve(tmp_path, capfd, backend):
    policy = {"name": "support-bot", "denied_tools": ["tool_book_A"]}
    code, events = run_mine(write_mine_spec(tmp_path, safety_policy=policy), capfd)
    assert code == 0
    rates = [json.loads(line) for line in Path(events[-1]["files"]["pass_rates"]).read_text().splitlines()]
    assert rates[0] == {"task_id": "book_A", "solved": 0, "samples": K, "kept": False}
    assert events[-1]["metrics"]["kept"] == 0


@pytest.mark.parametrize("field", ["heldout_paths", "regression_paths"])
def test_a_spec_naming_other_tasks_than_train_tasks_is_refused_before_any_model_loads(tmp_path, capfd, field):
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text(task("secret", split="heldout").to_json_line() + "\n")
    code, events = run_mine(write_mine_spec(tmp_path, **{field: [str(heldout)]}), capfd)
    assert code == EXIT_FAILED
    assert events[-1]["kind"] == "bad_spec" and "reads train tasks only" in events[-1]["message"]
    assert not (tmp_path / "out").exists()


def test_a_task_filed_as_held_out_is_refused(tmp_path, capfd, backend):
    tasks = [task("book_A"), task("book_B", split="heldout")]
    code, events = run_mine(write_mine_spec(tmp_path, tasks), capfd)
    assert code == EXIT_FAILED
    assert events[-1]["kind"] == "bad_spec" and "filed as held-out (e.g. book_B)" in events[-1]["message"]
    assert backend.calls == []


def test_sigterm_during_generation_stops_the_job_without_writing_results(tmp_path, capfd, monkeypatch):
    # The signal arrives while the backend generates; the job notices it before judging and writing.
    scripted = ScriptedBackend(on_generate=lambda: os.kill(os.getpid(), signal.SIGTERM))
    monkeypatch.setattr(mine, "open_runtime", lambda *args, **kwargs: ScriptedRuntime(scripted))
    code, events = run_mine(write_mine_spec(tmp_path), capfd)
    assert code == EXIT_STOPPED
    assert events[-1] == {"event": "error", "kind": "stopped", "message": "stopped by SIGTERM before finishing"}
    assert not (tmp_path / "out" / "mined.jsonl").exists()


class FailingEnvironment:
    """An environment whose every episode fails (an unsafe call, say), whatever the verifier thinks."""

    def run_output(self, task: Task, output: str) -> Judgement:
        return Judgement(task_id=task.id, reward=0.0, passed=False, reason="unsafe", components={}, turns=1,
                         unsafe=["denied-tool"], execution_success=True)  # fmt: skip


def test_with_an_environment_its_judgement_decides_a_solve_not_the_verifier():
    answers = [right_answer("book_A")] * 2
    verifier = get_verifier("tool_call")
    assert mine.solves(task("book_A"), answers, verifier, None) == [True, True]
    assert mine.solves(task("book_A"), answers, verifier, FailingEnvironment()) == [False, False]  # type: ignore[arg-type]


def test_it_runs_on_the_tiny_model(tmp_path, capfd):
    tasks = [Task.from_json({**t.to_json(), "metadata": {"split": "train"}}) for t in tiny_tasks()]
    spec = write_mine_spec(tmp_path, tasks, base_model=str(TINY_MODEL), hyperparameters={
        "samples": 2, "max_new_tokens": 8, "device": "cpu", "batch_size": 5})  # fmt: skip
    code, events = run_mine(spec, capfd)
    assert code == 0, events[-1]
    done = events[-1]
    rates = [json.loads(line) for line in Path(done["files"]["pass_rates"]).read_text().splitlines()]
    assert [rate["task_id"] for rate in rates] == [t.id for t in tasks]
    assert all(rate["samples"] == 2 and 0 <= rate["solved"] <= 2 for rate in rates)
    kept = {rate["task_id"] for rate in rates if rate["kept"]}
    assert {json.loads(line)["id"] for line in Path(done["files"]["mined"]).read_text().splitlines()} == kept
    assert any(event["event"] == "log" and event["message"] == "generated 5/5" for event in events)


def test_mine_help_names_its_config(capsys):
    from trainer.cli import main

    with pytest.raises(SystemExit):
        main(["mine", "--help"])
    assert "MineConfig in trainer.spec.mine" in " ".join(capsys.readouterr().out.split())


# --- Episodes ---------------------------------------------------------------------------------

LOCKER = "tests.trainer.test_grpo_episodes:locker"
# Of its 8 sampled episodes, locker A's first 3 read the code before opening; every one of B's; none of C's.
READS = {"locker_A": 3, "locker_B": 8, "locker_C": 0}


class LockerAgent:
    """A sampled agent in the locker: asks for the code (READS[task] of its episodes) or guesses it, then opens.

    The code is only in `read_code`'s result, so an episode is solved only when that result reached the agent.
    """

    name = "scripted"

    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.batches: list[int] = []

    def generate(self, prompts, sampling: SamplingConfig, hooks: GenerationHooks | None = None):
        assert sampling.num_samples == 1  # one answer per live episode a turn
        self.batches.append(len(prompts))
        return [[Generation(self._answer(json.loads(prompt)), 10, 5, True, 0.01)] for prompt in prompts]

    def _answer(self, conversation: dict[str, Any]) -> str:
        task_id, messages = conversation["id"], conversation["messages"]
        results = [message["content"] for message in messages if message["role"] == "tool"]
        if not results:
            self.started[task_id] = self.started.get(task_id, 0) + 1
            reads = self.started[task_id] <= READS[task_id]
            return call_text("read_code") if reads else call_text("open_locker", code="a guess")
        if results[-1].startswith("{"):
            return call_text("open_locker", code=json.loads(results[-1])["code"])
        return "I could not open it."


def call_text(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def locker_task(task_id: str) -> Task:
    return Task(id=task_id, messages=[{"role": "user", "content": "Open the locker."}], tools=[],
                expected_calls=[ExpectedCall.exact("open_locker", {})],
                metadata=TaskMetadata(source="test", split="train"))  # fmt: skip


class EpisodeRuntime:
    def __init__(self, backend: LockerAgent) -> None:
        self.backend = backend
        self.description = "scripted"

    def render(self, task: Task) -> str:
        return json.dumps({"id": task.id, "messages": task.messages})


def test_with_max_turns_each_sample_is_an_episode_solved_only_by_reading_the_environment(tmp_path, capfd,
                                                                                         monkeypatch):
    agent = LockerAgent()
    monkeypatch.setattr(mine, "open_runtime", lambda *args, **kwargs: EpisodeRuntime(agent))
    spec = write_mine_spec(tmp_path, [locker_task(task_id) for task_id in READS],
                           hyperparameters={"environment": LOCKER, "max_turns": 3})  # fmt: skip
    code, events = run_mine(spec, capfd)
    assert code == 0, events[-1]
    rates = [json.loads(line) for line in (tmp_path / "out" / "pass_rates.jsonl").read_text().splitlines()]
    assert {rate["task_id"]: rate["solved"] for rate in rates} == READS
    assert [json.loads(line)["id"] for line in (tmp_path / "out" / "mined.jsonl").read_text().splitlines()] == [
        "locker_A"]
    assert agent.batches[0] == K * len(READS)  # every task's k episodes answered together, turn by turn
    assert any("each sample an episode of at most 3 turns" in event.get("message", "") for event in events)


def test_episodes_without_an_environment_are_refused_before_any_model_loads(tmp_path, capfd):
    code, events = run_mine(write_mine_spec(tmp_path, hyperparameters={"max_turns": 3}), capfd)
    assert code == EXIT_FAILED and "need an environment" in events[-1]["message"]
