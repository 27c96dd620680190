"""The `judge` job: a local model scores each item against the agent's rubric, with a written reason.

`python -m trainer judge --spec run.json` loads the spec's base model (plus its adapter, if any)
with transformers in this process, shows it each item (a trajectory, or a task and an answer;
`trainer.spec.judge`) as the rubric's chat (`trainer.verifiers.judge.judge_messages`), lets it
reply greedily in batches after the reply prefix "Score:", and reads each reply into a score in
[0, 1], passed or not, and a reason (`parse_reply`: an unreadable reply gets no score, never 0 or 1).

Emits a `judged` metric as the batches finish (progress), a log line per stage, and a done event
whose `results` is `judgements.jsonl`: one line per item, in input order, with its id, score,
passed, reason and the raw reply. The done metrics count the items, those scored and those passed.
What a judgement is worth (its agreement with reviewers) is the app's to measure, not this job's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec
from trainer.jobs import EventStream, StopFlag
from trainer.rollout import GenerationHooks, Runtime, open_runtime
from trainer.spec.config import config_from_json
from trainer.spec.eval import SamplingConfig
from trainer.spec.judge import JudgeConfig, read_judge_items
from trainer.verifiers.judge import REPLY_PREFIX, JudgeItem, Judgement, Rubric, judge_messages, judgement


def render_judge_prompt(rubric: Rubric, item: JudgeItem, tokenizer: Any, max_chars: int) -> str:
    """The judge's prompt text: its chat in the model's template, ending with the reply prefix."""
    chat = judge_messages(rubric, item, max_chars)
    return str(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)) + REPLY_PREFIX


def judge_items(runtime: Runtime, rubric: Rubric, items: Sequence[JudgeItem], sampling: SamplingConfig,
                max_chars: int, hooks: GenerationHooks | None = None) -> list[Judgement]:  # fmt: skip
    """Each item's judgement: its rubric chat in the model's template, the reply generated and read."""
    prompts = [render_judge_prompt(rubric, item, runtime.tokenizer, max_chars) for item in items]
    replies = runtime.backend.generate(prompts, sampling, hooks or GenerationHooks())
    return [judgement(item.id, REPLY_PREFIX + samples[0].text, rubric)
            for item, samples in zip(items, replies, strict=True)]  # fmt: skip


def summary(judgements: Sequence[Judgement]) -> dict[str, Any]:
    """The done event's metrics: counts, and the mean score of the items that got one."""
    scores = [item.score for item in judgements if item.score is not None]
    return {
        "items": len(judgements), "scored": len(scores), "unreadable": len(judgements) - len(scores),
        "passed": sum(item.passed is True for item in judgements),
        "mean_score": round(sum(scores) / len(scores), 4) if scores else None,
    }  # fmt: skip


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `judge` job of the protocol."""
    config = config_from_json(JudgeConfig, spec.hyperparameters, "judge hyperparameters")
    rubric = config.parsed_rubric()
    items = read_judge_items(spec.task_paths)
    adapter = f" + adapter {spec.adapter}" if spec.adapter else ""
    events.emit(LogEvent(f"judging {len(items)} item(s) with {spec.base_model}{adapter}"))
    runtime = open_runtime(spec.base_model, spec.adapter, "transformers", config.device, spec.seed)
    events.emit(LogEvent(f"judge ready: {runtime.description}"))
    hooks = GenerationHooks(should_stop=lambda: stop.requested,
                            on_progress=lambda done, total: events.emit(MetricEvent(step=done, name="judged",
                                                                                    value=float(done))))  # fmt: skip
    judgements = judge_items(runtime, rubric, items, config.sampling(spec.seed), config.max_transcript_chars, hooks)
    output = Path(spec.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "judgements.jsonl"
    path.write_text("".join(json.dumps(line.to_json(), ensure_ascii=False) + "\n" for line in judgements),
                    encoding="utf-8")  # fmt: skip
    metrics = summary(judgements)
    if metrics["unreadable"]:
        events.emit(LogEvent(f"{metrics['unreadable']} of {len(items)} replies had no readable score", "warning"))
    return DoneEvent(metrics=metrics, results=str(path), files={"judgements": str(path)})
