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

`judge_items` (one chat per item) and `judge_groups` (one chat per group of answers to one task,
`trainer.verifiers.group_judge`, for GRPO's group-relative judge reward) share one loop,
`judge_replies`: render each chat in the model's template, generate after the reply prefix, read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec
from trainer.jobs import EventStream, StopFlag
from trainer.rollout import GenerationHooks, Runtime, open_runtime
from trainer.spec.config import config_from_json
from trainer.spec.eval import SamplingConfig
from trainer.spec.judge import JudgeConfig, read_judge_items
from trainer.verifiers.group_judge import GROUP_REPLY_PREFIX, JudgeGroup, group_judge_messages, group_judgements
from trainer.verifiers.judge import REPLY_PREFIX, JudgeItem, Judgement, Rubric, judge_messages, judgement


def render_judge_prompt(chat: Sequence[Mapping[str, str]], tokenizer: Any, prefix: str) -> str:
    """The judge's prompt text: its chat in the model's template, ending with the reply's `prefix`."""
    return str(tokenizer.apply_chat_template(list(chat), add_generation_prompt=True, tokenize=False)) + prefix


def judge_replies(runtime: Runtime, chats: Sequence[Sequence[Mapping[str, str]]], prefix: str,
                  sampling: SamplingConfig, hooks: GenerationHooks | None = None) -> list[str]:  # fmt: skip
    """The judge's reply to each chat, generated after `prefix` and returned with it in front."""
    prompts = [render_judge_prompt(chat, runtime.tokenizer, prefix) for chat in chats]
    replies = runtime.backend.generate(prompts, sampling, hooks or GenerationHooks())
    return [prefix + samples[0].text for samples in replies]


def judge_items(runtime: Runtime, rubric: Rubric, items: Sequence[JudgeItem], sampling: SamplingConfig,
                max_chars: int, hooks: GenerationHooks | None = None) -> list[Judgement]:  # fmt: skip
    """Each item's judgement: its rubric chat in the model's template, the reply generated and read."""
    chats = [judge_messages(rubric, item, max_chars) for item in items]
    replies = judge_replies(runtime, chats, REPLY_PREFIX, sampling, hooks)
    return [judgement(item.id, reply, rubric) for item, reply in zip(items, replies, strict=True)]


def judge_groups(runtime: Runtime, rubric: Rubric, groups: Sequence[JudgeGroup], sampling: SamplingConfig,
                 max_chars: int, hooks: GenerationHooks | None = None) -> list[list[Judgement]]:  # fmt: skip
    """Each group's judgements, one per answer: one judge chat and one reply per group, read per candidate."""
    chats = [group_judge_messages(rubric, group, max_chars) for group in groups]
    replies = judge_replies(runtime, chats, GROUP_REPLY_PREFIX, sampling, hooks)
    return [group_judgements(group, reply, rubric) for group, reply in zip(groups, replies, strict=True)]


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
