"""The `mine` job: hard-task mining, the train tasks the current model solves sometimes but not always.

A GRPO group whose completions all score the same gives no gradient; a task the model always or
never solves gives only such groups. For each train task (the spec's task files, or a seeded
sample of them) the model generates k completions in one sampled pass (`num_samples` = k, seeded
by the spec), and each completion is judged: by the environment where the config names one
(workbench: the episode passed, which needs the expected end state and no unsafe call), else by the
verifier's verdict `passed`. With `max_turns` above 1 each of the k samples is a whole episode in
the environment (`trainer.episodes`, the k episodes of every task played together, each turn one
sampled answer per live episode), judged passed or not as GRPO on episodes will reward it. A task
solved by between `min_solved` and `max_solved` of its k
samples is kept (`trainer.spec.mine.MineConfig`).

The job writes `mined.jsonl` (the kept tasks, each line `Task.to_json_line()`, in file order) and
`pass_rates.jsonl` (every mined task's id, its solves of k and whether it was kept), reports the
counts as metrics, and ends with a done event naming both files; the app freezes the kept tasks
as a train snapshot. Train tasks only: a spec with held-out or regression paths is refused before
any task file is read, and so is a task file holding a task filed as held-out. It trains nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, SampleEvent, Task
from trainer.environments import Environment
from trainer.episodes import Episode, run_episodes
from trainer.evaluate import execution_environment
from trainer.jobs import EventStream, JobStopped, StopFlag
from trainer.rollout import Generation, GenerationBackend, GenerationHooks, open_runtime
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.environments import EpisodeBudget
from trainer.spec.eval import SamplingConfig, safety_policy
from trainer.spec.mine import MineConfig
from trainer.spec.tasks import last_user_text, read_task_files, seeded_sample, skipped_warning, with_skipped
from trainer.verifiers import Verifier, get_verifier

HELDOUT = "heldout"
COUNTS = ("tasks", "kept", "all_solved", "none_solved", "mean_pass_rate")


@dataclass
class Mining:
    """What `mine_tasks` needs besides the tasks: how to generate and how to judge a completion."""

    backend: GenerationBackend
    render: Callable[[Task], str]
    verifier: Verifier
    environment: Environment | None = None


@dataclass(frozen=True)
class Mined:
    """One task's k completions and whether each solved it."""

    task: Task
    completions: list[str]
    solved: list[bool]

    @property
    def count(self) -> int:
        return sum(self.solved)


def solves(task: Task, completions: Sequence[str], verifier: Verifier, environment: Environment | None) -> list[bool]:
    """Whether each completion solves `task`: the environment's judgement where one runs, else the verifier's."""
    if environment is not None:
        return [environment.run_output(task, text).passed for text in completions]
    return [verdict.passed for verdict in verifier.verify([task] * len(completions), list(completions))]


def mine_tasks(
    tasks: Sequence[Task], mining: Mining, sampling: SamplingConfig, hooks: GenerationHooks | None = None,
    budget: EpisodeBudget | None = None,
) -> list[Mined]:
    """k sampled completions per task (one batched pass), each judged: the tasks' solves, in task order.

    With a `budget`, k sampled episodes per task instead (`mine_episodes`).
    """
    hooks = hooks or GenerationHooks()
    if budget is not None:
        return mine_episodes(tasks, mining, sampling, hooks, budget)
    generations = mining.backend.generate([mining.render(task) for task in tasks], sampling, hooks)
    mined = []
    for task, samples in zip(tasks, generations, strict=True):
        if hooks.should_stop():
            raise JobStopped()
        texts = [sample.text for sample in samples]
        mined.append(Mined(task, texts, solves(task, texts, mining.verifier, mining.environment)))
    return mined


def mine_episodes(
    tasks: Sequence[Task], mining: Mining, sampling: SamplingConfig, hooks: GenerationHooks, budget: EpisodeBudget,
) -> list[Mined]:
    """`sampling.num_samples` episodes per task in the mining environment, each judged passed or not."""
    environment = mining.environment
    if environment is None:
        raise SpecError("episodes need an environment to run their calls in")
    k = sampling.num_samples
    one_each = dataclasses.replace(sampling, num_samples=1)

    def respond(episodes: list[Episode]) -> list[Generation]:
        if hooks.should_stop():
            raise JobStopped()
        generations = mining.backend.generate([mining.render(episode.conversation) for episode in episodes],
                                              one_each, hooks)  # fmt: skip
        return [samples[0] for samples in generations]

    episodes = run_episodes([task for task in tasks for _ in range(k)], environment.spawn, respond, budget)
    mined = []
    for index, task in enumerate(tasks):
        played = episodes[index * k:(index + 1) * k]
        mined.append(Mined(task, [episode.output for episode in played],
                           [episode.judgement is not None and episode.judgement.passed for episode in played]))
    return mined


def mine_report(mined: Sequence[Mined], config: MineConfig) -> dict[str, Any]:
    """The counts the job reports: kept, solved every time, never; the mean pass rate; the pass@k histogram."""
    counts = [item.count for item in mined]
    k = config.samples
    return {
        "tasks": len(counts),
        "kept": sum(config.keeps(count) for count in counts),
        "all_solved": counts.count(k),
        "none_solved": counts.count(0),
        "mean_pass_rate": round(sum(counts) / (k * len(counts)), 6) if counts else 0.0,
        "samples": k,
        "min_solved": config.min_solved,
        "max_solved": config.upper_bound,
        # Tasks by how many of their k samples solved them: "0" ... "k".
        "histogram": {str(solved): counts.count(solved) for solved in range(k + 1)},
    }


def check_train_only(spec: RunSpec) -> None:
    """Refuse, before any file is read, a spec that names tasks other than the train tasks to mine."""
    if spec.heldout_paths or spec.regression_paths:
        raise SpecError("a mine job reads train tasks only: its spec may name no heldout_paths or regression_paths")


def check_no_heldout_task(tasks: Sequence[Task]) -> None:
    heldout = [task.id for task in tasks if task.metadata.split == HELDOUT]
    if heldout:
        raise SpecError(f"{len(heldout)} task(s) are filed as held-out (e.g. {', '.join(heldout[:3])}): "
                        "a mine job reads train tasks only")


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `mine` job: sample, judge, keep the tasks within the bounds, write them and their pass rates."""
    check_train_only(spec)
    config = config_from_json(MineConfig, spec.hyperparameters, "mine hyperparameters")
    loaded = read_task_files(spec.task_paths, strict=config.strict_tasks)
    check_no_heldout_task(loaded.tasks)
    if warning := skipped_warning(loaded.skipped):
        events.emit(warning)
    tasks = seeded_sample(loaded.tasks, config.sample_size, spec.seed)
    events.emit(LogEvent(f"mining {len(tasks)} of {len(loaded.tasks)} train tasks, {config.samples} samples each, "
                         f"keeping those solved {config.min_solved} to {config.upper_bound} times, on "
                         f"{spec.base_model}" + (f" + adapter {spec.adapter}" if spec.adapter else "")))
    budget = config.episode_budget()
    if budget is not None:
        events.emit(LogEvent(f"each sample an episode of at most {budget.max_turns} turns and {budget.max_tokens} "
                             f"generated tokens in {config.environment}"))
    mined = mine_tasks(tasks, _mining(spec, config, events), config.sampling(spec.seed), GenerationHooks(
        should_stop=lambda: stop.requested,
        on_progress=lambda done, total: events.emit(LogEvent(f"generated {done}/{total}")),
    ), budget)  # fmt: skip
    return with_skipped(_finish(spec, config, mined, events), loaded.skipped)


def _mining(spec: RunSpec, config: MineConfig, events: EventStream) -> Mining:
    policy = safety_policy(config.safety_policy, spec.safety_policy)
    environment = execution_environment(config.environment, policy)
    runtime = open_runtime(spec.base_model, spec.adapter, config.backend, config.device, spec.seed)
    events.emit(LogEvent(f"model ready: {runtime.description}"))
    return Mining(runtime.backend, runtime.render, get_verifier(config.verifier, policy), environment)


def _finish(spec: RunSpec, config: MineConfig, mined: Sequence[Mined], events: EventStream) -> DoneEvent:
    output = Path(spec.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    kept = [item for item in mined if config.keeps(item.count)]
    mined_path, rates_path = output / "mined.jsonl", output / "pass_rates.jsonl"
    mined_path.write_text("".join(item.task.to_json_line() + "\n" for item in kept), encoding="utf-8")
    rates_path.write_text("".join(json.dumps(_rate(item, config)) + "\n" for item in mined), encoding="utf-8")
    for item in kept[: config.sample_events]:
        solving = item.completions[item.solved.index(True)] if item.count else item.completions[0]
        rate = item.count / config.samples
        events.emit(SampleEvent(step=0, task_id=item.task.id, prompt=last_user_text(item.task), completion=solving,
                                reward=rate, components={"pass_rate": rate}))
    report = mine_report(mined, config)
    for name in COUNTS:
        events.emit(MetricEvent(step=0, name=name, value=float(report[name])))
    events.emit(LogEvent(f"kept {report['kept']} of {report['tasks']} train tasks; {report['all_solved']} solved "
                         f"every time, {report['none_solved']} never"))
    report["config"] = asdict(config)
    return DoneEvent(metrics=report, files={"mined": str(mined_path), "pass_rates": str(rates_path)})


def _rate(item: Mined, config: MineConfig) -> dict[str, Any]:
    return {"task_id": item.task.id, "solved": item.count, "samples": config.samples, "kept": config.keeps(item.count)}
