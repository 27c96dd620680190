"""The `replay` job: answer a failing step's conversation again with a version, and score both answers.

`python -m trainer replay --spec run.json` loads the spec's base model with its adapter (the
version to replay against; none for the base model) in this process, renders each case's
messages and tools as evaluation does (`trainer.prompts`), generates the one next answer
(greedy by default, so a replay run twice answers the same) and scores the new answer and the
recorded one with the same checks (`trainer.verifiers.answer.score_answer`): calls as JSON,
schema validity, the agent's safety policy from the spec, and correctness where the case carries
an expected answer. For a multi-turn agent the single next turn is what is replayed: the
answer that replaces the failing one, not a whole new episode. Nothing here talks to a serving
process: a replay never changes what the live server answers.

Writes `replay.jsonl` (one line per case: its id, the new answer with its token counts and
latency, and both answers' scores), emits one `sample` event per case (the new answer, its
reward where known) and ends with a done event whose `results` is that file.
Cases and hyperparameters: `trainer.spec.replay`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer.contracts import DoneEvent, LogEvent, RunSpec, SampleEvent
from trainer.jobs import EventStream, StopFlag
from trainer.rollout import Generation, GenerationHooks, open_runtime
from trainer.spec.config import config_from_json
from trainer.spec.eval import safety_policy
from trainer.spec.replay import ReplayCase, ReplayConfig, read_replay_cases
from trainer.spec.tasks import last_user_text
from trainer.verifiers import SafetyPolicy
from trainer.verifiers.answer import score_answer


def case_result(case: ReplayCase, generation: Generation, policy: SafetyPolicy) -> dict[str, Any]:
    """One results line: the new answer and the scores of it and of the recorded answer."""
    task = case.task()
    original = score_answer(task, case.original, policy, expected=case.has_expected) if case.original else None
    return {
        "id": case.id, "output": generation.text, "finished": generation.finished,
        "prompt_tokens": generation.prompt_tokens, "completion_tokens": generation.completion_tokens,
        "latency_s": round(generation.latency_s, 4), "has_expected": case.has_expected,
        "scores": score_answer(task, generation.text, policy, expected=case.has_expected).to_json(),
        "original_scores": original.to_json() if original else None,
    }  # fmt: skip


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `replay` job of the protocol."""
    config = config_from_json(ReplayConfig, spec.hyperparameters, "replay hyperparameters")
    cases = read_replay_cases(spec.task_paths)
    policy = safety_policy(config.safety_policy, spec.safety_policy)
    adapter = f" + adapter {spec.adapter}" if spec.adapter else ""
    events.emit(LogEvent(f"replaying {len(cases)} case(s) on {spec.base_model}{adapter}"))
    runtime = open_runtime(spec.base_model, spec.adapter, config.backend, config.device, spec.seed)
    events.emit(LogEvent(f"model ready: {runtime.description}"))
    prompts = [runtime.render(case.task()) for case in cases]
    generations = runtime.backend.generate(prompts, config.sampling(spec.seed),
                                           GenerationHooks(should_stop=lambda: stop.requested))  # fmt: skip
    results = [case_result(case, samples[0], policy) for case, samples in zip(cases, generations, strict=True)]
    output = Path(spec.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "replay.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in results), encoding="utf-8")
    for case, line in zip(cases, results, strict=True):
        scores = line["scores"]
        events.emit(SampleEvent(step=0, task_id=case.id, prompt=last_user_text(case.task()), completion=line["output"],
                                reward=scores["reward"] if scores["reward"] is not None else 0.0,
                                components=_components(scores)))  # fmt: skip
    return DoneEvent(metrics={"cases": len(results)}, results=str(path), files={"replay": str(path)})


def _components(scores: dict[str, Any]) -> dict[str, float]:
    """The checks that applied, as 0/1 numbers (a sample's components are numbers)."""
    names = ("valid_json", "schema_valid", "correct_tool", "correct_arguments")
    flags = {name: float(scores[name]) for name in names if scores[name] is not None}
    return {**flags, "unsafe": float(scores["unsafe"])}
