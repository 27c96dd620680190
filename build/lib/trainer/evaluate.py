"""Evaluate a model (a base, or a base plus an adapter) on a task snapshot, with DESIGN.md's metrics.

Each task is rendered (`trainer.prompts`), generated (`trainer.rollout`), parsed and judged:
- valid JSON: the output's calls are written as JSON, and every call block is well-formed: the
  parser read at least one call, from JSON only (bare, in `<tool_call>` tags, in a code fence, or
  inside prose; `trainer.parsing`'s `ParseResult.json`), and no tag or fence or opening call block
  failed to parse; one malformed call among several makes the answer invalid, and Python call
  syntax is not JSON. Parseable is the looser rate: the parser read at least one call in any
  syntax it accepts (JSON or Python), as the verifiers do. For a task that expects no call, an
  answer without one counts as both;
- correct tool: exactly the expected tools were called; correct arguments: the tools and
  every argument match (`trainer.verifiers.matching`, lenient values);
- unsafe action: a call breaks the safety policy; verifier pass and reward: the verdict
  of the configured verifier (`bfcl` for benchmark-comparable scores);
- execution success: the task's environment ran the output's calls and reached the expected
  state; an output whose calls cannot be read runs nothing and fails. The environment is the
  job's (`environment: workbench`), else the one the task's episode names (`replay`, say; each
  built once), else none: then it is reported as not applicable (null).
Every rate comes with a Wilson 95% interval (mean reward with a bootstrap one), overall and
per bucket and per source, along with latency p50/p95, tokens and cost per task, per-task
results, and the method recommended next. `run_eval` is the `eval` job of the protocol.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, SampleEvent, Task, ToolCall
from trainer.environments import Environment, EnvironmentUnavailable, make_environment
from trainer.environments.workbench.data import WorkbenchDataMissing
from trainer.episodes import TRUNCATING_ENDS, Episode, run_episodes
from trainer.jobs import EventStream, StopFlag
from trainer.parsing import NO_CALL, parse_tool_calls
from trainer.prompts import tool_names, with_prompt_change
from trainer.rollout import Generation, GenerationBackend, GenerationHooks, open_runtime
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.environments import EpisodeBudget, check_executing_environment
from trainer.spec.eval import EvalConfig, SamplingConfig, safety_policy
from trainer.spec.recommend import recommend
from trainer.spec.stats import mean, mean_interval, percentile, rate_interval
from trainer.spec.tasks import (
    last_user_text,
    read_task_files,
    seeded_sample,
    skipped_warning,
    snapshot_sha256,
    with_skipped,
)
from trainer.verifiers import SafetyPolicy, Verifier, get_verifier
from trainer.verifiers.matching import match_calls
from trainer.verifiers.safety import check_task_calls

RATES = ("valid_json", "parseable", "correct_tool", "correct_arguments", "execution_success", "unsafe_action",
         "verifier_pass")
NO_GROUP = "(none)"
_NO_ENVIRONMENT = "not applicable: no environment ran these tasks"


def execution_environment(name: str | None, policy: SafetyPolicy) -> Environment | None:
    """The sandbox that runs each answer for execution success; None for none.

    A SpecError when its data is missing or a team's entry point cannot build it: before any generation.
    """
    if name is None:
        return None
    try:
        return make_environment(name, policy=policy)
    except (WorkbenchDataMissing, EnvironmentUnavailable) as error:
        raise SpecError(str(error)) from None


def task_environments(
    tasks: Sequence[Task], job_environment: str | None, policy: SafetyPolicy, episodes: bool = False,
) -> dict[str, Environment]:
    """The environments the tasks' episodes name, each built once, by name; none when the job names one (it wins).

    A SpecError before any generation: for an environment that cannot be built (naming it and a
    task that names it), and, for `episodes`, for a task left with no environment at all.
    """
    if job_environment is not None:
        return {}
    if episodes and (bare := next((task.id for task in tasks if _named_environment(task) is None), None)):
        raise SpecError(f"episodes need an environment to run their calls in: task {bare} names none and the job "
                        "names none")
    named: dict[str, str] = {}
    for task in tasks:
        if (name := _named_environment(task)) is not None:
            named.setdefault(name, task.id)
    return {name: _named_built(name, task_id, policy) for name, task_id in named.items()}


def _named_environment(task: Task) -> str | None:
    return task.episode.environment if task.episode is not None else None


def _named_built(name: str, task_id: str, policy: SafetyPolicy) -> Environment:
    try:
        check_executing_environment(name)
        environment = execution_environment(name, policy)
    except (SpecError, ValueError, KeyError) as error:
        message = error.args[0] if error.args else str(error)
        raise SpecError(f"environment {name!r} of task {task_id} cannot be built: {message}") from None
    assert environment is not None  # the name is not None
    return environment


@dataclass(frozen=True)
class Judgement:
    """What the metrics read from one output, before the verifier's verdict."""

    calls: list[ToolCall] | None
    parse_error: str | None
    valid_json: bool
    correct_tool: bool
    correct_arguments: bool
    violations: list[str]
    parseable: bool


@dataclass(frozen=True)
class TaskResult:
    """One task's line in the results file."""

    task_id: str
    bucket: str | None
    source: str | None
    output: str
    calls: list[dict[str, Any]] | None
    parse_error: str | None
    valid_json: bool
    correct_tool: bool
    correct_arguments: bool
    execution_success: bool | None
    unsafe_action: bool
    violations: list[str]
    verifier_pass: bool
    reward: float
    verdict: dict[str, Any]
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    finished: bool
    cost: float
    parseable: bool | None = None  # None in results written before it was measured
    # Episodes only (`max_turns` above 1): model turns, why the episode ended, and its turns as chat messages.
    turns: int | None = None
    ended: str | None = None
    episode: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(task: Task, output: str, policy: SafetyPolicy) -> Judgement:
    """Valid JSON, parseable, correct tool, correct arguments and safety of one output for one task."""
    parsed = parse_tool_calls(output)
    called = parsed.ok and bool(parsed.calls)
    if task.no_call_expected:
        abstained = not parsed.calls and (parsed.ok or parsed.error_kind == NO_CALL)
        return Judgement(parsed.calls if parsed.ok else None, parsed.error, abstained or (called and parsed.json),
                         abstained, abstained, _violations(task, parsed.calls, policy), parseable=abstained or called)
    if not called:
        return Judgement(parsed.calls if parsed.ok else None, parsed.error, False, False, False, [], parseable=False)
    match = match_calls(task, parsed.calls)
    return Judgement(parsed.calls, None, parsed.json, match.tool_share == 1.0, match.complete,
                     _violations(task, parsed.calls, policy), parseable=True)


def _violations(task: Task, calls: list[ToolCall], policy: SafetyPolicy) -> list[str]:
    return [violation.rule_id for violation in check_task_calls(policy, task, calls)]


@dataclass(frozen=True)
class Prices:
    """Cost per million prompt and generated tokens."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1_000_000


def task_result(
    task: Task, generation: Generation, verifier: Verifier, policy: SafetyPolicy, prices: Prices,
    environment: Environment | None = None,
) -> TaskResult:
    """Judge, verify and (where an environment exists) execute one generation of one task."""
    judged = judge(task, generation.text, policy)
    verdict = verifier.verify([task], [generation.text])[0]
    # The environment judges the output itself: an unreadable one runs nothing and never succeeds.
    executed = bool(environment.run_output(task, generation.text).execution_success) if environment else None
    return TaskResult(
        task_id=task.id, bucket=task.metadata.bucket, source=task.metadata.source, output=generation.text,
        calls=[call.to_json() for call in judged.calls] if judged.calls is not None else None,
        parse_error=judged.parse_error, valid_json=judged.valid_json, parseable=judged.parseable,
        correct_tool=judged.correct_tool,
        correct_arguments=judged.correct_arguments, execution_success=executed,
        unsafe_action=bool(judged.violations), violations=judged.violations, verifier_pass=verdict.passed,
        reward=verdict.reward, verdict=verdict.to_json(), latency_s=round(generation.latency_s, 4),
        prompt_tokens=generation.prompt_tokens, completion_tokens=generation.completion_tokens,
        finished=generation.finished, cost=prices.cost(generation.prompt_tokens, generation.completion_tokens),
    )


# --- Metrics ------------------------------------------------------------------------------


def summarize(results: Sequence[TaskResult], resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """DESIGN.md's metrics over `results`: each rate with its Wilson 95% interval, mean reward with a bootstrap one.

    A rate over the tasks it was measured on (`n`); none measured (execution success without an
    environment, or no task at all) is `{"value": None, "low": None, "high": None, "n": 0}`.
    """
    summary: dict[str, Any] = {"tasks": len(results)}
    for name in RATES:
        values = [float(value) for result in results if (value := getattr(result, name)) is not None]
        interval = rate_interval(values)
        summary[f"{name}_rate"] = interval.to_json() if interval else _unmeasured(name)
    rewards = mean_interval([result.reward for result in results], resamples=resamples, seed=seed)
    summary["mean_reward"] = rewards.to_json() if rewards else None
    summary.update(_episode_figures(results))
    latencies = [result.latency_s for result in results]
    summary["latency_p50_s"] = round(percentile(latencies, 50), 4) if latencies else None
    summary["latency_p95_s"] = round(percentile(latencies, 95), 4) if latencies else None
    for name in ("prompt_tokens", "completion_tokens", "cost"):
        values = [float(getattr(result, name)) for result in results]
        summary[f"{name}_per_task"] = round(mean(values), 6) if values else None
    return summary


def _episode_figures(results: Sequence[TaskResult]) -> dict[str, Any]:
    """Turns and calls per episode and the share the budget cut short, where the results are episodes."""
    episodes = [result for result in results if result.turns is not None]
    if not episodes:
        return {}
    truncated = rate_interval([float(result.ended in TRUNCATING_ENDS) for result in episodes])
    return {
        "turns_per_episode": round(mean([float(result.turns or 0) for result in episodes]), 4),
        "calls_per_episode": round(mean([float(len(result.calls or [])) for result in episodes]), 4),
        "truncation_rate": truncated.to_json() if truncated else _unmeasured("truncation"),
        "ended": dict(sorted(Counter(result.ended or "" for result in episodes).items())),
    }


def _unmeasured(name: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"value": None, "low": None, "high": None, "n": 0}
    if name == "execution_success":
        entry["note"] = _NO_ENVIRONMENT
    return entry


def grouped(results: Sequence[TaskResult], key: Callable[[TaskResult], str | None]) -> dict[str, list[TaskResult]]:
    groups: dict[str, list[TaskResult]] = defaultdict(list)
    for result in results:
        groups[key(result) or NO_GROUP].append(result)
    return dict(sorted(groups.items()))


def metrics_report(results: Sequence[TaskResult], resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Overall, per-bucket and per-source metrics, and the method the overall numbers recommend."""
    overall = summarize(results, resamples, seed)
    return {
        "overall": overall,
        "by_bucket": {name: summarize(group, resamples, seed)
                      for name, group in grouped(results, lambda r: r.bucket).items()},
        "by_source": {name: summarize(group, resamples, seed)
                      for name, group in grouped(results, lambda r: r.source).items()},
        "recommendation": recommend(overall).to_json(),
    }


# --- Running an evaluation -----------------------------------------------------------------


@dataclass
class Evaluation:
    """What `evaluate_tasks` needs besides the tasks: how to generate and how to judge."""

    backend: GenerationBackend
    render: Callable[[Task], str]
    verifier: Verifier
    policy: SafetyPolicy
    prices: Prices = field(default_factory=Prices)
    environment: Environment | None = None
    # The environments tasks name for themselves (`task_environments`), by name; filled on first use where not given.
    task_environments: dict[str, Environment] = field(default_factory=dict)


def environment_of(task: Task, evaluation: Evaluation) -> Environment | None:
    """Where `task` runs: the evaluation's environment, else the one its episode names, else none."""
    name = _named_environment(task)
    if evaluation.environment is not None or name is None:
        return evaluation.environment
    if name not in evaluation.task_environments:
        evaluation.task_environments.update(task_environments([task], None, evaluation.policy))
    return evaluation.task_environments[name]


def evaluate_tasks(
    tasks: Sequence[Task], evaluation: Evaluation, sampling: SamplingConfig, hooks: GenerationHooks | None = None,
    budget: EpisodeBudget | None = None,
) -> list[TaskResult]:
    """One greedy (or sampled) answer per task, judged, or with a `budget` one episode per task: the
    per-task results, in task order. Each task runs in `environment_of` it, all built before generating."""
    if budget is not None:
        return evaluate_episodes(tasks, evaluation, sampling, budget, hooks)
    environments = [environment_of(task, evaluation) for task in tasks]
    prompts = [evaluation.render(task) for task in tasks]
    generations = evaluation.backend.generate(prompts, sampling, hooks)
    return [
        task_result(task, samples[0], evaluation.verifier, evaluation.policy, evaluation.prices, environment)
        for task, samples, environment in zip(tasks, generations, environments, strict=True)
    ]


def evaluate_episodes(
    tasks: Sequence[Task], evaluation: Evaluation, sampling: SamplingConfig, budget: EpisodeBudget,
    hooks: GenerationHooks | None = None,
) -> list[TaskResult]:
    """One episode per task (`trainer.episodes`) in `environment_of` it, judged: per-task results, in task order.

    Tasks are played environment by environment, each group's live episodes answered in one batch a turn.
    """
    environments = [environment_of(task, evaluation) for task in tasks]
    if (bare := next((task.id for task, env in zip(tasks, environments, strict=True) if env is None), None)):
        raise SpecError(f"episodes need an environment to run their calls in: task {bare} names none and the job "
                        "names none")

    def respond(episodes: list[Episode]) -> list[Generation]:
        prompts = [evaluation.render(episode.conversation) for episode in episodes]
        generations = evaluation.backend.generate(prompts, sampling, hooks)
        return [samples[0] for samples in generations]

    results: dict[int, TaskResult] = {}
    for environment, indices in _by_environment(environments):
        episodes = run_episodes([tasks[index] for index in indices], environment.spawn, respond, budget)
        for index, episode in zip(indices, episodes, strict=True):
            results[index] = episode_result(episode, evaluation.policy, evaluation.prices)
    return [results[index] for index in range(len(tasks))]


def _by_environment(environments: Sequence[Environment | None]) -> list[tuple[Environment, list[int]]]:
    """The task indices of each environment, environments in order of first use."""
    groups: dict[int, tuple[Environment, list[int]]] = {}
    for index, environment in enumerate(environments):
        if environment is not None:
            groups.setdefault(id(environment), (environment, []))[1].append(index)
    return list(groups.values())


def episode_result(episode: Episode, policy: SafetyPolicy, prices: Prices) -> TaskResult:
    """An episode as a results line: every call of the episode judged together, the environment as its verifier."""
    task, judgement = episode.task, episode.judgement
    if judgement is None:
        raise ValueError(f"episode of {task.id} was never judged")
    judged = judge(task, episode.output, policy)
    violations = sorted({*judged.violations, *judgement.unsafe})
    calls = [call.to_json() for call in episode.calls]
    return TaskResult(
        task_id=task.id, bucket=task.metadata.bucket, source=task.metadata.source, output=episode.output,
        calls=calls, parse_error=episode.failure or judged.parse_error, valid_json=judged.valid_json,
        parseable=judged.parseable, correct_tool=judged.correct_tool, correct_arguments=judged.correct_arguments,
        execution_success=judgement.execution_success, unsafe_action=bool(violations), violations=violations,
        verifier_pass=judgement.passed, reward=judgement.reward, verdict=judgement.verdict().to_json(),
        latency_s=round(episode.latency_s, 4), prompt_tokens=episode.prompt_tokens,
        completion_tokens=episode.completion_tokens, finished=not judgement.truncated,
        cost=prices.cost(episode.prompt_tokens, episode.completion_tokens),
        turns=len(episode.turns), ended=episode.ended, episode=episode.messages,
    )


def changed_prompts(tasks: list[Task], config: EvalConfig, events: EventStream) -> list[Task]:
    """The tasks as the config's prompt change shows them (unchanged without one); a SpecError for a tool
    description of a tool no task offers, before any model loads."""
    if not config.system_preamble.strip() and not config.tool_descriptions:
        return tasks
    unknown = sorted(set(config.tool_descriptions) - tool_names(tasks))
    if unknown:
        raise SpecError(f"eval hyperparameters: tool_descriptions names tools the tasks do not offer: "
                        f"{', '.join(unknown)}")
    events.emit(LogEvent(f"prompt change: a system preamble of {len(config.system_preamble)} characters, "
                         f"{len(config.tool_descriptions)} tool description(s) replaced"))
    return [with_prompt_change(task, config.system_preamble, config.tool_descriptions) for task in tasks]


def run_eval(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `eval` job: evaluate, write results and metrics to the output folder, report them."""
    config = config_from_json(EvalConfig, spec.hyperparameters, "eval hyperparameters")
    loaded = read_task_files(spec.task_paths, strict=config.strict_tasks)
    all_tasks = loaded.tasks
    if warning := skipped_warning(loaded.skipped):
        events.emit(warning)
    tasks = changed_prompts(seeded_sample(all_tasks, config.sample_size, spec.seed), config, events)
    snapshot = snapshot_sha256(spec.task_paths)
    policy = safety_policy(config.safety_policy, spec.safety_policy)
    events.emit(LogEvent(f"evaluating {len(tasks)} of {len(all_tasks)} tasks (snapshot {snapshot[:12]}) "
                         f"on {spec.base_model}" + (f" + adapter {spec.adapter}" if spec.adapter else "")))
    # A bad environment, the job's or a task's, stops the job before the model loads.
    environment = execution_environment(config.environment, policy)
    environments = task_environments(tasks, config.environment, policy, episodes=config.max_turns > 1)
    runtime = open_runtime(spec.base_model, spec.adapter, config.backend, config.device, spec.seed)
    events.emit(LogEvent(f"model ready: {runtime.description}"))
    evaluation = Evaluation(
        backend=runtime.backend, render=runtime.render, verifier=get_verifier(config.verifier, policy), policy=policy,
        prices=Prices(config.price_per_million_input_tokens, config.price_per_million_output_tokens),
        environment=environment, task_environments=environments,
    )
    hooks = GenerationHooks(should_stop=lambda: stop.requested,
                            on_progress=lambda done, total: events.emit(LogEvent(f"generated {done}/{total}")))
    budget = config.episode_budget()
    if budget is not None:
        events.emit(LogEvent(f"episodes of at most {budget.max_turns} turns and {budget.max_tokens} generated tokens "
                             f"in {config.environment or 'the environment each task names'}"))
    results = evaluate_tasks(tasks, evaluation, config.sampling(spec.seed), hooks, budget)
    report = metrics_report(results, config.bootstrap_resamples, spec.seed)
    report.update(model={"base": spec.base_model, "adapter": spec.adapter, "resolved": runtime.description},
                  snapshot_sha256=snapshot, verifier=config.verifier, config=asdict(config), seed=spec.seed,
                  safety_policy=policy.to_json(), skipped_tasks=[line.to_json() for line in loaded.skipped])
    return with_skipped(_finish(spec, config, tasks, results, report, events), loaded.skipped)


def _finish(
    spec: RunSpec, config: EvalConfig, tasks: Sequence[Task], results: Sequence[TaskResult],
    report: Mapping[str, Any], events: EventStream,
) -> DoneEvent:
    output = Path(spec.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    results_path, metrics_path = output / "results.jsonl", output / "metrics.json"
    results_path.write_text("".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in results),
                            encoding="utf-8")
    metrics_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for task, result in list(zip(tasks, results, strict=True))[: config.sample_events]:
        events.emit(SampleEvent(step=0, task_id=task.id, prompt=last_user_text(task), completion=result.output,
                                reward=result.reward, components=result.verdict["components"], episode=result.episode))
    overall = report["overall"]
    for name, value in overall.items():
        number = value.get("value") if isinstance(value, dict) else value
        if isinstance(number, (int, float)):
            events.emit(MetricEvent(step=0, name=name, value=float(number)))
    recommendation = report["recommendation"]
    events.emit(LogEvent(f"recommended next: {recommendation['method']}: {recommendation['reason']}"))
    return DoneEvent(metrics=overall, results=str(results_path), files={"metrics": str(metrics_path)})
