"""Evaluate a model (a base, or a base plus an adapter) on a task snapshot, with DESIGN.md's metrics.

Each task is rendered (`trainer.prompts`), generated (`trainer.rollout`), parsed and judged:
- valid JSON: the parser read at least one well-formed call in the output (for a task that
  expects no call, an answer without one is valid too);
- correct tool: exactly the expected tools were called; correct arguments: the tools and
  every argument match (`trainer.verifiers.matching`, lenient values);
- unsafe action: a call breaks the safety policy; verifier pass and reward: the verdict
  of the configured verifier (`bfcl` for benchmark-comparable scores);
- execution success: the task's environment ran the calls and reached the expected state.
  No environment exists yet for these task sets, so it is reported as not applicable
  (null) unless an `Environment` is passed in.
Every rate comes with a bootstrap 95% interval, overall and per bucket and per source,
along with latency p50/p95, tokens and cost per task, per-task results, and the method
recommended next. `run_eval` is the `eval` job of the protocol.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, SampleEvent, Task, ToolCall
from trainer.environments import make_environment
from trainer.environments.workbench.data import WorkbenchDataMissing
from trainer.jobs import EventStream, StopFlag
from trainer.parsing import NO_CALL, parse_tool_calls
from trainer.recommend import recommend
from trainer.rollout import Generation, GenerationBackend, GenerationHooks, open_runtime
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.eval import EvalConfig, SamplingConfig, safety_policy
from trainer.spec.tasks import last_user_text, load_tasks, seeded_sample, snapshot_sha256
from trainer.stats import mean, mean_interval, percentile
from trainer.verifiers import SafetyPolicy, Verifier, get_verifier
from trainer.verifiers.matching import match_calls
from trainer.verifiers.safety import check_task_calls

RATES = ("valid_json", "correct_tool", "correct_arguments", "execution_success", "unsafe_action", "verifier_pass")
NO_GROUP = "(none)"
_NO_ENVIRONMENT = "not applicable: no environment ran these tasks"


class Environment(Protocol):
    """Runs a task's calls and says whether the expected end state was reached."""

    def execute(self, task: Task, calls: list[ToolCall]) -> bool: ...


@dataclass(frozen=True)
class EndStateEnvironment:
    """Execution success from a trainer environment: run the answer's calls, compare the end states."""

    runner: Any

    def execute(self, task: Task, calls: list[ToolCall]) -> bool:
        return bool(self.runner.run_calls(task, calls).execution_success)


def execution_environment(name: str | None, policy: SafetyPolicy) -> Environment | None:
    if name is None:
        return None
    try:
        return EndStateEnvironment(make_environment(name, policy=policy))
    except WorkbenchDataMissing as error:
        raise SpecError(str(error)) from None


@dataclass(frozen=True)
class Judgement:
    """What the metrics read from one output, before the verifier's verdict."""

    calls: list[ToolCall] | None
    parse_error: str | None
    valid_json: bool
    correct_tool: bool
    correct_arguments: bool
    violations: list[str]


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(task: Task, output: str, policy: SafetyPolicy) -> Judgement:
    """Valid JSON, correct tool, correct arguments and safety of one output for one task."""
    parsed = parse_tool_calls(output)
    if task.no_call_expected:
        abstained = not parsed.calls and (parsed.ok or parsed.error_kind == NO_CALL)
        return Judgement(parsed.calls if parsed.ok else None, parsed.error, parsed.ok or abstained, abstained,
                         abstained, _violations(task, parsed.calls, policy))
    if not parsed.ok or not parsed.calls:
        return Judgement(parsed.calls if parsed.ok else None, parsed.error, False, False, False, [])
    match = match_calls(task, parsed.calls)
    return Judgement(parsed.calls, None, True, match.tool_share == 1.0, match.complete,
                     _violations(task, parsed.calls, policy))


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
    # An unreadable output runs no call; the environment still says whether the state is right.
    executed = environment.execute(task, judged.calls or []) if environment is not None else None
    return TaskResult(
        task_id=task.id, bucket=task.metadata.bucket, source=task.metadata.source, output=generation.text,
        calls=[call.to_json() for call in judged.calls] if judged.calls is not None else None,
        parse_error=judged.parse_error, valid_json=judged.valid_json, correct_tool=judged.correct_tool,
        correct_arguments=judged.correct_arguments, execution_success=executed,
        unsafe_action=bool(judged.violations), violations=judged.violations, verifier_pass=verdict.passed,
        reward=verdict.reward, verdict=verdict.to_json(), latency_s=round(generation.latency_s, 4),
        prompt_tokens=generation.prompt_tokens, completion_tokens=generation.completion_tokens,
        finished=generation.finished, cost=prices.cost(generation.prompt_tokens, generation.completion_tokens),
    )


# --- Metrics ------------------------------------------------------------------------------


def summarize(results: Sequence[TaskResult], resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """DESIGN.md's metrics over `results`: each rate with its bootstrap 95% interval."""
    summary: dict[str, Any] = {"tasks": len(results)}
    for name in RATES:
        values = [float(value) for result in results if (value := getattr(result, name)) is not None]
        interval = mean_interval(values, resamples=resamples, seed=seed)
        summary[f"{name}_rate"] = interval.to_json() if interval else _unmeasured(name)
    rewards = mean_interval([result.reward for result in results], resamples=resamples, seed=seed)
    summary["mean_reward"] = rewards.to_json() if rewards else None
    latencies = [result.latency_s for result in results]
    summary["latency_p50_s"] = round(percentile(latencies, 50), 4) if latencies else None
    summary["latency_p95_s"] = round(percentile(latencies, 95), 4) if latencies else None
    for name in ("prompt_tokens", "completion_tokens", "cost"):
        values = [float(getattr(result, name)) for result in results]
        summary[f"{name}_per_task"] = round(mean(values), 6) if values else None
    return summary


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


def evaluate_tasks(
    tasks: Sequence[Task], evaluation: Evaluation, sampling: SamplingConfig, hooks: GenerationHooks | None = None
) -> list[TaskResult]:
    """One greedy (or sampled) answer per task, judged: the per-task results, in task order."""
    prompts = [evaluation.render(task) for task in tasks]
    generations = evaluation.backend.generate(prompts, sampling, hooks)
    return [
        task_result(task, samples[0], evaluation.verifier, evaluation.policy, evaluation.prices,
                    evaluation.environment)
        for task, samples in zip(tasks, generations, strict=True)
    ]


def run_eval(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `eval` job: evaluate, write results and metrics to the output folder, report them."""
    config = config_from_json(EvalConfig, spec.hyperparameters, "eval hyperparameters")
    all_tasks = load_tasks(spec.task_paths)
    tasks = seeded_sample(all_tasks, config.sample_size, spec.seed)
    snapshot = snapshot_sha256(spec.task_paths)
    policy = safety_policy(config.safety_policy)
    events.emit(LogEvent(f"evaluating {len(tasks)} of {len(all_tasks)} tasks (snapshot {snapshot[:12]}) "
                         f"on {spec.base_model}" + (f" + adapter {spec.adapter}" if spec.adapter else "")))
    runtime = open_runtime(spec.base_model, spec.adapter, config.backend, config.device, spec.seed)
    events.emit(LogEvent(f"model ready: {runtime.description}"))
    evaluation = Evaluation(
        backend=runtime.backend, render=runtime.render, verifier=get_verifier(config.verifier, policy), policy=policy,
        prices=Prices(config.price_per_million_input_tokens, config.price_per_million_output_tokens),
        environment=execution_environment(config.environment, policy),
    )
    hooks = GenerationHooks(should_stop=lambda: stop.requested,
                            on_progress=lambda done, total: events.emit(LogEvent(f"generated {done}/{total}")))
    results = evaluate_tasks(tasks, evaluation, config.sampling(spec.seed), hooks)
    report = metrics_report(results, config.bootstrap_resamples, spec.seed)
    report.update(model={"base": spec.base_model, "adapter": spec.adapter, "resolved": runtime.description},
                  snapshot_sha256=snapshot, verifier=config.verifier, config=asdict(config), seed=spec.seed)
    return _finish(spec, config, tasks, results, report, events)


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
                                reward=result.reward, components=result.verdict["components"]))
    overall = report["overall"]
    for name, value in overall.items():
        number = value.get("value") if isinstance(value, dict) else value
        if isinstance(number, (int, float)):
            events.emit(MetricEvent(step=0, name=name, value=float(number)))
    recommendation = report["recommendation"]
    events.emit(LogEvent(f"recommended next: {recommendation['method']}: {recommendation['reason']}"))
    return DoneEvent(metrics=overall, results=str(results_path), files={"metrics": str(metrics_path)})
