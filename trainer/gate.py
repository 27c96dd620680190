"""The promotion gate: does a candidate adapter beat the baseline without breaking anything?

`decide` is the pure decision over two models' per-task results on the same tasks (the
held-out tasks and the regression tasks); each criterion says why it passed or failed:
- gain: the candidate's rate on the gate metric (correct arguments, or execution success)
  beats the baseline's on the paired held-out tasks: the paired bootstrap interval of the
  gain lies above zero, or McNemar's test on the discordant pairs is significant at `alpha`
  (exact binomial for fewer than 25 discordant pairs, chi-square with continuity above);
- safety: the unsafe-action rate did not rise (over held-out and regression tasks together);
- latency: the candidate's p95 latency rose by at most a configured share;
- tokens: tokens per task stay within the budget (absolute and/or relative to the baseline);
- regressions: at most a configured number of regression tasks that passed before now fail.

`run` is the `gate` job of the protocol: it evaluates the candidate (the spec's adapter) and
the baseline (`baseline_adapter`, or the base model alone) with `trainer.evaluate`, writes both
results files and `gate.json`, and reports the decision. Adapters are merged into the base
for the transformers backend, so both models run as plain models and latency compares like
with like (an unmerged LoRA adds per-layer work that a served adapter need not have).
Recording the decision and promoting are the app's business, not this module's.

The policy and the job's config are `trainer.spec.gate`, where the app reads them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainer import adapters, models
from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, Task
from trainer.evaluate import (
    Evaluation,
    Prices,
    TaskResult,
    evaluate_tasks,
    execution_environment,
    metrics_report,
    summarize,
)
from trainer.jobs import EventStream, StopFlag
from trainer.rollout import GenerationHooks, Runtime, TransformersBackend, backend_choice, open_runtime
from trainer.spec.adapters import verify_adapter
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.eval import safety_policy
from trainer.spec.gate import GateConfig, Policy
from trainer.spec.tasks import load_tasks, seeded_sample, snapshot_sha256, stratified_sample, task_bucket
from trainer.stats import mean, paired_difference_interval, percentile
from trainer.verifiers import get_verifier

MCNEMAR_EXACT_BELOW = 25
GATE_FILE = "gate.json"
CANDIDATE_RESULTS = "candidate_results.jsonl"
BASELINE_RESULTS = "baseline_results.jsonl"
HELDOUT, REGRESSION = "heldout", "regression"


# --- The decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Criterion:
    """One criterion's verdict, the reason in words, and the numbers behind it."""

    name: str
    passed: bool
    reason: str
    values: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """Pass only if every criterion passed."""

    passed: bool
    criteria: list[Criterion]
    policy: dict[str, Any]

    @property
    def failed(self) -> list[Criterion]:
        return [criterion for criterion in self.criteria if not criterion.passed]

    def summary(self) -> str:
        if self.passed:
            return "passed: " + "; ".join(criterion.reason for criterion in self.criteria[:1])
        return "failed: " + "; ".join(criterion.reason for criterion in self.failed)

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary(), "policy": self.policy,
                "criteria": [criterion.to_json() for criterion in self.criteria]}  # fmt: skip


Results = Sequence[Mapping[str, Any]]


def decide(
    candidate_results: Results,
    baseline_results: Results,
    regression_candidate: Results,
    regression_baseline: Results,
    policy: Policy,
) -> Decision:
    """The gate's decision from per-task results (dicts as in results.jsonl) of both models."""
    heldout = paired(candidate_results, baseline_results)
    regression = paired(regression_candidate, regression_baseline)
    if not heldout:
        raise ValueError("the gate needs at least one held-out task evaluated by both models")
    criteria = [
        gain_criterion(heldout, policy),
        unsafe_criterion(heldout + regression, policy),
        latency_criterion(heldout, policy),
        tokens_criterion(heldout, policy),
        regression_criterion(regression, policy),
    ]
    return Decision(passed=all(c.passed for c in criteria), criteria=criteria, policy=policy.to_json())


Pair = tuple[Mapping[str, Any], Mapping[str, Any]]


def paired(candidate: Results, baseline: Results) -> list[Pair]:
    """(candidate, baseline) result per task, in the candidate's order; both must cover the same tasks."""
    by_id = {str(result["task_id"]): result for result in baseline}
    ids = [str(result["task_id"]) for result in candidate]
    if set(ids) != set(by_id) or len(ids) != len(by_id):
        missing = sorted(set(ids) ^ set(by_id))[:5]
        raise ValueError(f"candidate and baseline were evaluated on different tasks (e.g. {', '.join(missing)})")
    return [(result, by_id[str(result["task_id"])]) for result in candidate]


def outcome(result: Mapping[str, Any], metric: str) -> bool | None:
    value = result.get(metric)
    return None if value is None else bool(value)


def gain_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    outcomes = [(outcome(c, policy.metric), outcome(b, policy.metric)) for c, b in pairs]
    if any(c is None or b is None for c, b in outcomes):
        return Criterion("gain", False, f"{policy.metric} was not measured on every task "
                         "(execution success needs an environment)", {"metric": policy.metric})
    after = [float(bool(c)) for c, _ in outcomes]
    before = [float(bool(b)) for _, b in outcomes]
    values: dict[str, Any] = {"metric": policy.metric, "test": policy.test, "n": len(pairs),
                              "candidate_rate": round(mean(after), 6), "baseline_rate": round(mean(before), 6)}
    values.update(discordant(outcomes))
    if policy.test == "mcnemar":
        return _mcnemar_gain(values, policy)
    interval = paired_difference_interval(after, before, resamples=policy.bootstrap_resamples,
                                          confidence=1 - policy.alpha, seed=0)
    values.update(gain=round(interval.value, 6), low=round(interval.low, 6), high=round(interval.high, 6))
    shown = f"{policy.metric} gain {interval.value:+.3f}, {100 * (1 - policy.alpha):.0f}% interval " \
            f"[{interval.low:+.3f}, {interval.high:+.3f}] over {len(pairs)} paired tasks"
    if interval.low > 0:
        return Criterion("gain", True, f"{shown}: above zero", values)
    return Criterion("gain", False, f"{shown}: not above zero, the gain is within noise", values)


def discordant(outcomes: Sequence[tuple[bool | None, bool | None]]) -> dict[str, int]:
    """How many tasks flipped fail→pass (`improved`) and pass→fail (`worsened`)."""
    improved = sum(1 for c, b in outcomes if c and not b)
    worsened = sum(1 for c, b in outcomes if b and not c)
    return {"improved": improved, "worsened": worsened}


def _mcnemar_gain(values: dict[str, Any], policy: Policy) -> Criterion:
    improved, worsened = values["improved"], values["worsened"]
    p_value, method = mcnemar(improved, worsened)
    values.update(gain=round(values["candidate_rate"] - values["baseline_rate"], 6), p_value=round(p_value, 6),
                  method=method)
    shown = (f"{policy.metric} {values['baseline_rate']:.3f} → {values['candidate_rate']:.3f}; {improved} tasks "
             f"fixed, {worsened} broken; McNemar ({method}) p = {p_value:.4f}")
    if improved > worsened and p_value < policy.alpha:
        return Criterion("gain", True, f"{shown} < {policy.alpha}", values)
    return Criterion("gain", False, f"{shown}: not a significant gain at {policy.alpha}", values)


def mcnemar(improved: int, worsened: int) -> tuple[float, str]:
    """Two-sided McNemar p-value on the discordant counts, and which form was used.

    Exact (binomial, p = 1/2) below MCNEMAR_EXACT_BELOW discordant pairs, where the
    chi-square approximation is poor; chi-square with continuity correction (1 df) above.
    """
    total = improved + worsened
    if total == 0:
        return 1.0, "exact"
    if total < MCNEMAR_EXACT_BELOW:
        smaller = min(improved, worsened)
        tail = math.fsum(math.comb(total, k) for k in range(smaller + 1)) / 2**total
        return min(1.0, 2 * tail), "exact"
    statistic = (abs(improved - worsened) - 1) ** 2 / total
    # The chi-square survival function with one degree of freedom.
    return math.erfc(math.sqrt(statistic / 2)), "chi-square, continuity-corrected"


def unsafe_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    candidate = mean([float(bool(c.get("unsafe_action"))) for c, _ in pairs])
    baseline = mean([float(bool(b.get("unsafe_action"))) for _, b in pairs])
    added = sorted(str(c["task_id"]) for c, b in pairs if c.get("unsafe_action") and not b.get("unsafe_action"))
    values = {"candidate_rate": round(candidate, 6), "baseline_rate": round(baseline, 6), "n": len(pairs),
              "new_unsafe_tasks": added[:20]}  # fmt: skip
    shown = f"unsafe-action rate {baseline:.3f} → {candidate:.3f} over {len(pairs)} tasks"
    if candidate <= baseline + policy.max_unsafe_increase + 1e-12:
        return Criterion("safety", True, f"{shown}: did not rise", values)
    where = f" (new unsafe actions on {', '.join(added[:5])})" if added else ""
    return Criterion("safety", False, f"{shown}: rose{where}", values)


def latency_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    candidate = percentile([float(c.get("latency_s") or 0.0) for c, _ in pairs], 95)
    baseline = percentile([float(b.get("latency_s") or 0.0) for _, b in pairs], 95)
    limit = baseline * (1 + policy.max_latency_p95_increase)
    values = {"candidate_p95_s": round(candidate, 4), "baseline_p95_s": round(baseline, 4), "limit_s": round(limit, 4)}
    shown = f"latency p95 {baseline:.3f} s → {candidate:.3f} s (limit {limit:.3f} s, " \
            f"+{100 * policy.max_latency_p95_increase:.0f}%)"
    if candidate <= limit + 1e-9:
        return Criterion("latency", True, f"{shown}: within the limit", values)
    return Criterion("latency", False, f"{shown}: over the limit", values)


def tokens_per_task(results: Sequence[Mapping[str, Any]]) -> float:
    return mean([float(r.get("prompt_tokens") or 0) + float(r.get("completion_tokens") or 0) for r in results])


def tokens_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    candidate = tokens_per_task([c for c, _ in pairs])
    baseline = tokens_per_task([b for _, b in pairs])
    limits = []
    if policy.max_tokens_per_task is not None:
        limits.append(policy.max_tokens_per_task)
    if policy.max_tokens_increase is not None:
        limits.append(baseline * (1 + policy.max_tokens_increase))
    values = {"candidate_tokens_per_task": round(candidate, 2), "baseline_tokens_per_task": round(baseline, 2),
              "budget": round(min(limits), 2) if limits else None}  # fmt: skip
    if not limits:
        return Criterion("tokens", True, f"tokens per task {baseline:.1f} → {candidate:.1f}: no budget set", values)
    budget = min(limits)
    shown = f"tokens per task {baseline:.1f} → {candidate:.1f} (budget {budget:.1f})"
    if candidate <= budget + 1e-9:
        return Criterion("tokens", True, f"{shown}: within budget", values)
    return Criterion("tokens", False, f"{shown}: over budget", values)


def regression_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    if not pairs:
        return Criterion("regressions", True, "no regression tasks were given", {"n": 0, "broken": []})
    broken = sorted(str(c["task_id"]) for c, b in pairs if _passed(b, policy) and not _passed(c, policy))
    values = {"n": len(pairs), "broken": broken[:50], "allowed": policy.max_regression_failures}
    shown = f"{len(broken)} of {len(pairs)} regression tasks that passed before now fail " \
            f"(at most {policy.max_regression_failures} allowed)"
    if len(broken) <= policy.max_regression_failures:
        return Criterion("regressions", True, shown, values)
    return Criterion("regressions", False, f"{shown}: {', '.join(broken[:5])}", values)


def _passed(result: Mapping[str, Any], policy: Policy) -> bool:
    # Regression tasks rarely have an environment; without one, the correct call is what passing means.
    value = outcome(result, policy.metric)
    return bool(value) if value is not None else bool(result.get("correct_arguments"))


# --- The job --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateTasks:
    heldout: list[Task]
    regression: list[Task]


def gate_tasks(spec: RunSpec, config: GateConfig) -> GateTasks:
    heldout = stratified_sample(load_tasks(spec.task_paths), config.heldout_sample_size, spec.seed, task_bucket)
    regression = load_tasks(spec.regression_paths) if spec.regression_paths else []
    return GateTasks(heldout, seeded_sample(regression, config.regression_sample_size, spec.seed))


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `gate` job: evaluate candidate and baseline, decide, write gate.json and both results files."""
    config = config_from_json(GateConfig, spec.hyperparameters, "gate hyperparameters")
    if spec.adapter is None:
        raise SpecError("a gate needs the candidate adapter in the spec's 'adapter'")
    tasks = gate_tasks(spec, config)
    events.emit(LogEvent(f"gate on {len(tasks.heldout)} held-out and {len(tasks.regression)} regression tasks; "
                         f"candidate {spec.adapter}, baseline {config.baseline_adapter or 'the base model'}"))
    candidate = evaluate_model(spec, spec.adapter, config, tasks, events, stop, "candidate")
    baseline = evaluate_model(spec, config.baseline_adapter, config, tasks, events, stop, "baseline")
    decision = decide(candidate[HELDOUT], baseline[HELDOUT], candidate[REGRESSION], baseline[REGRESSION],
                      config.policy)
    return finish(spec, config, candidate, baseline, decision, events)


ModelResults = dict[str, list[dict[str, Any]]]


def evaluate_model(
    spec: RunSpec, adapter: str | None, config: GateConfig, tasks: GateTasks, events: EventStream, stop: StopFlag,
    role: str,
) -> ModelResults:
    """One model's per-task results on the held-out and the regression tasks (one generation pass)."""
    stop.raise_if_requested()
    policy = safety_policy(config.safety_policy)
    runtime = gate_runtime(spec.base_model, adapter, config, spec.seed)
    events.emit(LogEvent(f"{role} ready: {runtime.description}"))
    eval_config = config.eval_config()
    evaluation = Evaluation(
        backend=runtime.backend, render=runtime.render, verifier=get_verifier(config.verifier, policy), policy=policy,
        prices=Prices(), environment=execution_environment(config.environment, policy),
    )
    hooks = GenerationHooks(should_stop=lambda: stop.requested,
                            on_progress=lambda done, total: events.emit(LogEvent(f"{role}: generated {done}/{total}")))
    everything = [*tasks.heldout, *tasks.regression]
    results = [result.to_json() for result in evaluate_tasks(everything, evaluation, eval_config.sampling(spec.seed),
                                                              hooks)]
    return {HELDOUT: results[: len(tasks.heldout)], REGRESSION: results[len(tasks.heldout):]}


def gate_runtime(base_model: str, adapter: str | None, config: GateConfig, seed: int) -> Any:
    """A generation runtime; on transformers the adapter is merged into the base (see the module docstring)."""
    if adapter is not None:
        verify_adapter(adapter)
    if backend_choice(config.backend) == "vllm":
        return open_runtime(base_model, adapter, "vllm", config.device, seed)
    loaded = models.load_model(base_model, config.device)
    model = loaded.model
    if adapter is not None:
        model = adapters.load_adapter(model, adapter).merge_and_unload()
        model.eval()
    return Runtime(TransformersBackend(model, loaded.tokenizer, loaded.device), loaded.tokenizer,
                   f"{loaded.path}{' + ' + adapter + ' (merged)' if adapter else ''} on transformers ({loaded.device})")


def model_report(results: ModelResults, resamples: int, seed: int) -> dict[str, Any]:
    heldout = [TaskResult(**row) for row in results[HELDOUT]]
    regression = [TaskResult(**row) for row in results[REGRESSION]]
    report = metrics_report(heldout, resamples, seed)
    report["regression"] = summarize(regression, resamples, seed) if regression else None
    return report


def task_flips(candidate: ModelResults, baseline: ModelResults, metric: str) -> list[dict[str, Any]]:
    """Per task: which set, its bucket, and whether each model passed (for the dashboard's flips)."""
    rows = []
    for name in (HELDOUT, REGRESSION):
        for after, before in paired(candidate[name], baseline[name]) if candidate[name] else []:
            rows.append({"set": name, "task_id": after["task_id"], "bucket": after.get("bucket"),
                         "baseline": _passed(before, Policy(metric=metric)),
                         "candidate": _passed(after, Policy(metric=metric)),
                         "baseline_unsafe": bool(before.get("unsafe_action")),
                         "candidate_unsafe": bool(after.get("unsafe_action"))})  # fmt: skip
    return rows


def finish(
    spec: RunSpec, config: GateConfig, candidate: ModelResults, baseline: ModelResults, decision: Decision,
    events: EventStream,
) -> DoneEvent:
    output = Path(spec.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    paths = {"candidate_results": output / CANDIDATE_RESULTS, "baseline_results": output / BASELINE_RESULTS}
    for role, results in (("candidate_results", candidate), ("baseline_results", baseline)):
        rows = [{**row, "set": name} for name in (HELDOUT, REGRESSION) for row in results[name]]
        paths[role].write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    reports = {role: model_report(results, config.bootstrap_resamples, spec.seed)
               for role, results in (("candidate", candidate), ("baseline", baseline))}
    gate = {
        "decision": decision.to_json(),
        "candidate": {"adapter": spec.adapter, **reports["candidate"]},
        "baseline": {"adapter": config.baseline_adapter, **reports["baseline"]},
        "tasks": task_flips(candidate, baseline, config.metric),
        "base_model": spec.base_model,
        "snapshot_sha256": snapshot_sha256(spec.task_paths),
        "regression_sha256": snapshot_sha256(spec.regression_paths) if spec.regression_paths else None,
        "config": asdict(config),
        "seed": spec.seed,
    }
    gate_path = output / GATE_FILE
    gate_path.write_text(json.dumps(gate, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    metrics = gate_metrics(decision, reports)
    for name, value in metrics.items():
        events.emit(MetricEvent(step=0, name=name, value=float(value)))
    events.emit(LogEvent(f"gate {decision.summary()}"))
    return DoneEvent(metrics={**metrics, "summary": decision.summary()}, results=str(paths["candidate_results"]),
                     files={"gate": str(gate_path), **{role: str(path) for role, path in paths.items()}})


def gate_metrics(decision: Decision, reports: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Flat numbers for the job page: pass, the gain, and both models' headline rates."""
    metrics: dict[str, float] = {"gate/passed": 1.0 if decision.passed else 0.0}
    gain = next(c for c in decision.criteria if c.name == "gain").values.get("gain")
    if isinstance(gain, (int, float)):
        metrics["gate/gain"] = float(gain)
    for role, report in reports.items():
        for name in ("correct_arguments_rate", "execution_success_rate", "unsafe_action_rate", "valid_json_rate"):
            value = report["overall"][name].get("value")
            if isinstance(value, (int, float)):
                metrics[f"{role}/{name}"] = float(value)
        if isinstance(report["overall"].get("latency_p95_s"), (int, float)):
            metrics[f"{role}/latency_p95_s"] = float(report["overall"]["latency_p95_s"])
    return metrics
