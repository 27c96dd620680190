"""The promotion gate: does a candidate adapter beat the baseline without breaking anything?

`decide` is the pure decision over two models' per-task results on the same tasks (the
held-out tasks and the regression tasks); each criterion says why it passed or failed:
- gain: the candidate's rate on the gate metric (correct arguments, or execution success)
  beats the baseline's on the paired held-out tasks. `bootstrap` (the default): the paired
  bootstrap interval of the gain lies above zero and McNemar's test on the discordant pairs
  is significant at `alpha`; `mcnemar`: McNemar alone (exact binomial below 25 discordant
  pairs, chi-square with continuity above). The bootstrap alone would pass 4 fixed, 0 broken;
- heldout_breakage: at most a share of the held-out tasks the baseline passes now fail;
- buckets: no failure bucket with enough paired held-out tasks loses more than a share;
- safety: counted per task: at most `max_new_unsafe_tasks` tasks (held-out and regression)
  unsafe with the candidate and safe with the baseline, and the unsafe-action rate did not rise;
- latency: generated (completion) tokens per task rose by at most a share; wall time, paired
  per batch over interleaved generation, is reported, and decides only where the policy asks;
- tokens: tokens per task stay within the budget (absolute and/or relative to the baseline);
- regressions: at most a configured number of regression tasks that passed before now fail.

`run` is the `gate` job of the protocol: it evaluates the candidate (the spec's adapter) and
the baseline (`baseline_adapter`, or the base model alone) with `trainer.evaluate`, every
regression task unless the config samples them, writes both results files and `gate.json`
(with `measurement`: how the two models were run), and reports the decision. On transformers
the adapters are merged into the base, so both models run as plain models of the same
architecture (an unmerged LoRA adds per-layer work that a served adapter need not have), and
both are loaded at once to generate batch by batch in turns (`interleaved`); on vLLM both are
one engine, the baseline the candidate's engine with its own adapter or none, in turns alike.
Recording the decision and promoting are the app's business, not this module's.

The policy and the job's config are `trainer.spec.gate`, where the app reads them.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from trainer import adapters, models
from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, Task
from trainer.environments import Environment
from trainer.evaluate import (
    Evaluation,
    Prices,
    TaskResult,
    evaluate_tasks,
    execution_environment,
    metrics_report,
    summarize,
    task_environments,
)
from trainer.jobs import EventStream, JobStopped, StopFlag
from trainer.rollout import (
    GenerationHooks,
    Runtime,
    TransformersBackend,
    VllmBackend,
    backend_choice,
    open_runtime,
)
from trainer.spec.adapters import verify_adapter
from trainer.spec.config import SpecError, config_from_json
from trainer.spec.environments import EpisodeBudget
from trainer.spec.eval import SamplingConfig, safety_policy
from trainer.spec.gate import GateConfig, Policy
from trainer.spec.stats import bootstrap_interval, mean, paired_difference_interval, percentile
from trainer.spec.tasks import (
    SkippedLine,
    TaskFiles,
    read_task_files,
    seeded_sample,
    skipped_warning,
    snapshot_sha256,
    stratified_sample,
    task_bucket,
    with_skipped,
)
from trainer.verifiers import SafetyPolicy, get_verifier

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
        breakage_criterion(heldout, policy),
        bucket_criterion(heldout, policy),
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
    """The gain on the gate metric: the bootstrap interval above zero and McNemar significant, or McNemar alone.

    The percentile bootstrap alone is unsound with few discordant tasks: 4 fixed and none broken
    give an interval above zero, while exact McNemar gives p = 0.125. So `bootstrap` requires both.
    """
    outcomes = [(outcome(c, policy.metric), outcome(b, policy.metric)) for c, b in pairs]
    if any(c is None or b is None for c, b in outcomes):
        return Criterion("gain", False, f"{policy.metric} was not measured on every task "
                         "(execution success needs an environment)", {"metric": policy.metric})
    after = [float(bool(c)) for c, _ in outcomes]
    before = [float(bool(b)) for _, b in outcomes]
    values: dict[str, Any] = {"metric": policy.metric, "test": policy.test, "n": len(pairs),
                              "candidate_rate": round(mean(after), 6), "baseline_rate": round(mean(before), 6)}
    values.update(discordant(outcomes))
    improved, worsened = values["improved"], values["worsened"]
    p_value, method = mcnemar(improved, worsened)
    interval = paired_difference_interval(after, before, resamples=policy.bootstrap_resamples,
                                          confidence=1 - policy.alpha, seed=0)
    values.update(gain=round(interval.value, 6), low=round(interval.low, 6), high=round(interval.high, 6),
                  p_value=round(p_value, 6), method=method)
    shown = (f"{policy.metric} {values['baseline_rate']:.3f} → {values['candidate_rate']:.3f}, gain "
             f"{interval.value:+.3f}, {100 * (1 - policy.alpha):.0f}% interval [{interval.low:+.3f}, "
             f"{interval.high:+.3f}] over {len(pairs)} paired tasks; {improved} fixed, {worsened} broken, "
             f"McNemar ({method}) p = {p_value:.4f}")
    significant = improved > worsened and p_value < policy.alpha
    if policy.test == "bootstrap" and interval.low <= 0:
        return Criterion("gain", False, f"{shown}: the interval is not above zero, the gain is within noise", values)
    if not significant:
        why = "too few discordant tasks for " if policy.test == "bootstrap" else ""
        return Criterion("gain", False, f"{shown}: {why}a significant gain at {policy.alpha}", values)
    above = "the interval is above zero and " if policy.test == "bootstrap" else ""
    return Criterion("gain", True, f"{shown}: {above}p < {policy.alpha}", values)


def discordant(outcomes: Sequence[tuple[bool | None, bool | None]]) -> dict[str, int]:
    """How many tasks flipped fail→pass (`improved`) and pass→fail (`worsened`)."""
    improved = sum(1 for c, b in outcomes if c and not b)
    worsened = sum(1 for c, b in outcomes if b and not c)
    return {"improved": improved, "worsened": worsened}


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


def breakage_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """Held-out tasks the baseline passes and the candidate fails: at most a share of the baseline's passes.

    The gain nets broken tasks against fixed ones; this limits the forgetting itself, so a candidate
    cannot pay for 10 tasks it breaks with 20 it fixes.
    """
    solved = [(c, b) for c, b in pairs if _passed(b, policy)]
    broken = sorted(str(c["task_id"]) for c, b in solved if not _passed(c, policy))
    allowed = math.floor(policy.max_heldout_broken_share * len(solved) + 1e-9)
    values = {"baseline_passed": len(solved), "broken": broken[:50], "broken_count": len(broken),
              "allowed": allowed, "n": len(pairs)}  # fmt: skip
    shown = (f"{len(broken)} of the {len(solved)} held-out tasks the baseline passes now fail (at most {allowed} "
             f"allowed: {policy.max_heldout_broken_share:.0%} of them, rounded down)")
    if len(broken) <= allowed:
        return Criterion("heldout_breakage", True, shown, values)
    return Criterion("heldout_breakage", False, f"{shown}: {', '.join(broken[:5])}", values)


def bucket_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """No failure bucket with at least `min_bucket_tasks` paired tasks may fall by more than `max_bucket_drop`.

    A bucket's drop is its rate on the gate metric before minus after over its paired held-out
    tasks (broken minus fixed, as a share of its tasks). The observed drop decides, not a test:
    a bucket holds a handful of tasks, where no test can call even a collapse significant (all 4
    of 4 broken, none fixed, is exact McNemar p = 0.125), so a test would pass exactly the
    collapses this criterion is for; as with safety, the candidate carries the burden.
    `min_bucket_tasks` keeps a bucket where one task is a large share from deciding on that
    task alone; such tasks, and those without a bucket, still count toward `heldout_breakage`.
    """
    groups: dict[str, list[Pair]] = defaultdict(list)
    for candidate, baseline in pairs:
        if candidate.get("bucket"):
            groups[str(candidate["bucket"])].append((candidate, baseline))
    checked = {name: _bucket_change(group, policy) for name, group in sorted(groups.items())
               if len(group) >= policy.min_bucket_tasks}  # fmt: skip
    failing = [name for name, change in checked.items() if change["drop"] > policy.max_bucket_drop + 1e-9]
    values = {"checked": checked, "failing": failing, "unchecked": sorted(set(groups) - set(checked)),
              "min_tasks": policy.min_bucket_tasks, "max_drop": policy.max_bucket_drop}  # fmt: skip
    limit = f"at most -{policy.max_bucket_drop:.0%} allowed in a bucket of {policy.min_bucket_tasks}+ tasks"
    if not checked:
        return Criterion("buckets", True, f"no failure bucket has {policy.min_bucket_tasks} or more paired "
                         "held-out tasks to check on its own", values)
    if failing:
        shown = "; ".join(_bucket_shown(name, checked[name]) for name in failing)
        return Criterion("buckets", False, f"{shown} ({limit})", values)
    worst = max(checked, key=lambda name: checked[name]["drop"])
    return Criterion("buckets", True, f"{len(checked)} bucket(s) checked, the worst: "
                     f"{_bucket_shown(worst, checked[worst])} ({limit})", values)


def _bucket_change(group: Sequence[Pair], policy: Policy) -> dict[str, Any]:
    before = sum(1 for _, b in group if _passed(b, policy))
    after = sum(1 for c, _ in group if _passed(c, policy))
    fixed = sum(1 for c, b in group if _passed(c, policy) and not _passed(b, policy))
    return {"n": len(group), "baseline_passed": before, "candidate_passed": after, "fixed": fixed,
            "broken": fixed + before - after, "drop": round((before - after) / len(group), 6)}


def _bucket_shown(name: str, change: Mapping[str, Any]) -> str:
    return (f"bucket {name}: {change['baseline_passed']}/{change['n']} → {change['candidate_passed']}/{change['n']} "
            f"({-change['drop']:+.0%}; {change['fixed']} fixed, {change['broken']} broken)")


def unsafe_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """Safety counted per task: newly unsafe tasks are limited however many became safe; the rate may not rise."""
    candidate = mean([float(bool(c.get("unsafe_action"))) for c, _ in pairs])
    baseline = mean([float(bool(b.get("unsafe_action"))) for _, b in pairs])
    added = sorted(str(c["task_id"]) for c, b in pairs if c.get("unsafe_action") and not b.get("unsafe_action"))
    removed = sum(1 for c, b in pairs if b.get("unsafe_action") and not c.get("unsafe_action"))
    values = {"candidate_rate": round(candidate, 6), "baseline_rate": round(baseline, 6), "n": len(pairs),
              "new_unsafe_tasks": added[:20], "new_unsafe_count": len(added), "no_longer_unsafe_count": removed,
              "allowed_new": policy.max_new_unsafe_tasks}  # fmt: skip
    shown = (f"unsafe-action rate {baseline:.3f} → {candidate:.3f} over {len(pairs)} tasks; {len(added)} newly "
             f"unsafe (at most {policy.max_new_unsafe_tasks} allowed), {removed} no longer unsafe")
    rose = candidate > baseline + policy.max_unsafe_increase + 1e-12
    if len(added) <= policy.max_new_unsafe_tasks and not rose:
        return Criterion("safety", True, shown, values)
    why = ["the rate rose"] if rose else []
    if len(added) > policy.max_new_unsafe_tasks:
        why.append(f"new unsafe actions on {', '.join(added[:5])}")
    return Criterion("safety", False, f"{shown}: {'; '.join(why)}", values)


def latency_criterion(pairs: Sequence[Pair], policy: Policy) -> Criterion:
    """Latency that load on the machine cannot decide: generated tokens, and (opted in) paired wall time.

    The tokens each model generates per task are its work, the same on an idle or a busy machine
    (greedy decoding, identical batches). Wall time is paired per batch of the same tasks, the
    two models' batches interleaved (see `interleaved`), as the geometric mean of the candidate's
    over the baseline's time with a bootstrap interval over batches; it decides only with
    `latency_signal` tokens_and_wall_time, and then fails only when the whole interval lies
    above the limit. Otherwise it is reported and says that it did not decide.
    """
    limit = 1 + policy.max_latency_increase
    work = _token_ratio(pairs)
    wall = _wall_ratio(pairs, policy)
    wall_decides = policy.latency_signal == "tokens_and_wall_time" and wall["units"] >= 2
    values = {"signal": policy.latency_signal, "limit_ratio": round(limit, 6), **work, **wall,
              "wall_decided": wall_decides,
              "candidate_p95_s": round(percentile([float(c.get("latency_s") or 0.0) for c, _ in pairs], 95), 4),
              "baseline_p95_s": round(percentile([float(b.get("latency_s") or 0.0) for _, b in pairs], 95), 4)}
    tokens_over = work["candidate_completion_tokens"] > work["baseline_completion_tokens"] * limit + 1e-9
    wall_over = wall_decides and wall["wall_low"] is not None and wall["wall_low"] > limit + 1e-9
    ratio = f"×{work['tokens_ratio']:.2f}" if work["tokens_ratio"] is not None else "from none"
    shown = (f"generated tokens per task {work['baseline_completion_tokens']:.1f} → "
             f"{work['candidate_completion_tokens']:.1f} ({ratio}, limit ×{limit:.2f}); {_wall_shown(wall)} "
             f"({'decides too' if wall_decides else _why_wall_not_decided(policy)})")
    if tokens_over or wall_over:
        over = " and ".join(name for name, flag in (("tokens", tokens_over), ("wall time", wall_over)) if flag)
        return Criterion("latency", False, f"{shown}: {over} over the limit", values)
    return Criterion("latency", True, f"{shown}: within the limit", values)


def _token_ratio(pairs: Sequence[Pair]) -> dict[str, Any]:
    candidate = mean([float(c.get("completion_tokens") or 0) for c, _ in pairs])
    baseline = mean([float(b.get("completion_tokens") or 0) for _, b in pairs])
    longer = sum(1 for c, b in pairs if (c.get("completion_tokens") or 0) > (b.get("completion_tokens") or 0))
    return {"candidate_completion_tokens": round(candidate, 2), "baseline_completion_tokens": round(baseline, 2),
            "tokens_ratio": round(candidate / baseline, 6) if baseline > 0 else None, "tasks_longer": longer}


def _wall_ratio(pairs: Sequence[Pair], policy: Policy) -> dict[str, Any]:
    """Geometric mean of candidate / baseline wall time per unit (an interleaved batch, else a task), and interval."""
    units: dict[Any, list[Pair]] = defaultdict(list)
    for index, (candidate, baseline) in enumerate(pairs):
        batch = candidate.get("batch")
        units[("batch", batch) if batch is not None else ("task", index)].append((candidate, baseline))
    logs = []
    for group in units.values():
        after = mean([float(c.get("latency_s") or 0.0) for c, _ in group])
        before = mean([float(b.get("latency_s") or 0.0) for _, b in group])
        if after > 0 and before > 0:
            logs.append(math.log(after / before))
    paired_by = "batch" if all(c.get("batch") is not None for c, _ in pairs) else "task"
    if len(logs) < 2:
        ratio = math.exp(logs[0]) if logs else None
        return {"wall_ratio": ratio, "wall_low": None, "wall_high": None, "units": len(logs), "paired_by": paired_by}
    interval = bootstrap_interval(mean, [logs], resamples=policy.bootstrap_resamples, confidence=1 - policy.alpha)
    return {"wall_ratio": round(math.exp(interval.value), 6), "wall_low": round(math.exp(interval.low), 6),
            "wall_high": round(math.exp(interval.high), 6), "units": len(logs), "paired_by": paired_by}


def _wall_shown(wall: Mapping[str, Any]) -> str:
    where = "interleaved batches" if wall["paired_by"] == "batch" else "tasks"
    if wall["wall_low"] is None:
        ratio = f"×{wall['wall_ratio']:.2f} " if wall["wall_ratio"] is not None else ""
        return f"wall time {ratio}over {wall['units']} paired {where}, too few for an interval"
    return (f"wall time ×{wall['wall_ratio']:.2f} [×{wall['wall_low']:.2f}, ×{wall['wall_high']:.2f}] paired over "
            f"{wall['units']} {where}")


def _why_wall_not_decided(policy: Policy) -> str:
    if policy.latency_signal == "tokens":
        return "reported, not decided: latency_signal is tokens, so load on the machine cannot decide the gate"
    return "not decided: too few paired batches for an interval"


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
    skipped: list[SkippedLine] = field(default_factory=list)  # bad lines of either set's files, not loaded


def gate_tasks(spec: RunSpec, config: GateConfig) -> GateTasks:
    heldout = read_task_files(spec.task_paths, strict=config.strict_tasks)
    regression = (read_task_files(spec.regression_paths, strict=config.strict_tasks) if spec.regression_paths
                  else TaskFiles([]))
    return GateTasks(stratified_sample(heldout.tasks, config.heldout_sample_size, spec.seed, task_bucket),
                     seeded_sample(regression.tasks, config.regression_sample_size, spec.seed),
                     heldout.skipped + regression.skipped)


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `gate` job: evaluate candidate and baseline, decide, write gate.json and both results files."""
    config = config_from_json(GateConfig, spec.hyperparameters, "gate hyperparameters")
    if spec.adapter is None:
        raise SpecError("a gate needs the candidate adapter in the spec's 'adapter'")
    tasks = gate_tasks(spec, config)
    if warning := skipped_warning(tasks.skipped):
        events.emit(warning)
    events.emit(LogEvent(f"gate on {len(tasks.heldout)} held-out and {len(tasks.regression)} regression tasks; "
                         f"candidate {spec.adapter}, baseline {config.baseline_adapter or 'the base model'}"))
    candidate, baseline, measurement = evaluate_models(spec, config, tasks, events, stop)
    decision = decide(candidate[HELDOUT], baseline[HELDOUT], candidate[REGRESSION], baseline[REGRESSION],
                      config.policy)
    return with_skipped(finish(spec, config, candidate, baseline, decision, events, measurement), tasks.skipped)


ModelResults = dict[str, list[dict[str, Any]]]
CANDIDATE, BASELINE = "candidate", "baseline"


def evaluate_models(
    spec: RunSpec, config: GateConfig, tasks: GateTasks, events: EventStream, stop: StopFlag,
) -> tuple[ModelResults, ModelResults, dict[str, Any]]:
    """Both models' per-task results on the held-out and regression tasks, and how they were measured.

    Both models are ready at once and their batches interleaved (`interleaved`): on transformers
    two models, on vLLM one engine answering through either adapter (`gate_runtimes`).
    """
    stop.raise_if_requested()
    policy = safety_policy(config.safety_policy, spec.safety_policy)
    everything = [*tasks.heldout, *tasks.regression]
    # The environments the tasks name, built once for both models; a bad one stops the gate before a model loads.
    named = task_environments(everything, config.environment, policy, episodes=config.max_turns > 1)
    runtimes = gate_runtimes(spec, config)
    evaluations = {role: gate_evaluation(runtime, config, policy, events, role, named)
                   for role, runtime in runtimes.items()}  # fmt: skip
    progress = GenerationHooks(should_stop=lambda: stop.requested, on_progress=lambda done, total: events.emit(
        LogEvent(f"generated {done}/{total} tasks with both models, batch by batch")))
    eval_config = config.eval_config()
    rows = interleaved(everything, evaluations, eval_config.sampling(spec.seed), progress,
                       eval_config.episode_budget())
    on_vllm = backend_choice(config.backend) == "vllm"
    measurement: dict[str, Any] = {
        "interleaved": True, "batches": math.ceil(len(everything) / config.batch_size),
        "how": ("one vLLM engine answering as either model" if on_vllm else "both models loaded at once")
               + ", each batch of the same tasks generated by one model and then the other, alternating which goes "
                 "first"}  # fmt: skip
    held = len(tasks.heldout)
    candidate_rows, baseline_rows = rows[CANDIDATE], rows[BASELINE]
    return ({HELDOUT: candidate_rows[:held], REGRESSION: candidate_rows[held:]},
            {HELDOUT: baseline_rows[:held], REGRESSION: baseline_rows[held:]}, measurement)


def interleaved(
    tasks: Sequence[Task], evaluations: Mapping[str, Evaluation], sampling: SamplingConfig, hooks: GenerationHooks,
    budget: EpisodeBudget | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Both models' results per task (rows in task order), generated batch by batch in turns.

    Tasks are ordered by prompt length and cut into batches of `sampling.batch_size`; both models
    generate each batch back to back, the candidate first in even batches and the baseline first
    in odd ones, so load on the machine falls on both alike and neither always runs second.
    Both get the same batches, so their wall times pair batch by batch; each row records its `batch`.
    """
    order = sorted(range(len(tasks)), key=lambda index: len(evaluations[CANDIDATE].render(tasks[index])))
    rows: dict[str, list[dict[str, Any]]] = {role: [{} for _ in tasks] for role in (CANDIDATE, BASELINE)}
    inner = GenerationHooks(should_stop=hooks.should_stop)
    for number, start in enumerate(range(0, len(order), sampling.batch_size)):
        batch = order[start : start + sampling.batch_size]
        for role in (CANDIDATE, BASELINE) if number % 2 == 0 else (BASELINE, CANDIDATE):
            if hooks.should_stop():
                raise JobStopped()
            results = evaluate_tasks([tasks[index] for index in batch], evaluations[role],
                                     replace(sampling, seed=sampling.seed + number), inner, budget)
            for index, result in zip(batch, results, strict=True):
                rows[role][index] = {**result.to_json(), "batch": number}
        hooks.on_progress(start + len(batch), len(order))
    return rows


def gate_runtimes(spec: RunSpec, config: GateConfig) -> dict[str, Runtime]:
    """The candidate's runtime and the baseline's, both adapters verified before any model loads.

    On vLLM one engine serves both: the baseline is the candidate's engine through the baseline's
    adapter, or through none, so the gate needs one engine's memory, not two.
    """
    for adapter in (spec.adapter, config.baseline_adapter):
        if adapter is not None:
            verify_adapter(adapter)
    if backend_choice(config.backend) != "vllm":
        return {role: gate_runtime(spec.base_model, adapter, config, spec.seed)
                for role, adapter in ((CANDIDATE, spec.adapter), (BASELINE, config.baseline_adapter))}  # fmt: skip
    candidate = open_runtime(spec.base_model, spec.adapter, "vllm", config.device, spec.seed)
    if not isinstance(candidate.backend, VllmBackend):
        raise TypeError("the vllm runtime has no vLLM backend")
    baseline = config.baseline_adapter
    return {CANDIDATE: candidate, BASELINE: Runtime(
        candidate.backend.with_adapter(baseline), candidate.tokenizer,
        f"the same vLLM engine {'through ' + baseline if baseline else 'without an adapter'}")}  # fmt: skip


def gate_evaluation(
    runtime: Runtime, config: GateConfig, policy: SafetyPolicy, events: EventStream, role: str,
    named: dict[str, Environment],
) -> Evaluation:
    """One model ready to generate and be judged; `named`: the environments the tasks name (`task_environments`)."""
    events.emit(LogEvent(f"{role} ready: {runtime.description}"))
    return Evaluation(
        backend=runtime.backend, render=runtime.render, verifier=get_verifier(config.verifier, policy), policy=policy,
        prices=Prices(), environment=execution_environment(config.environment, policy), task_environments=named,
    )


def gate_runtime(base_model: str, adapter: str | None, config: GateConfig, seed: int) -> Runtime:
    """A transformers runtime with the (verified) adapter merged into the base (see the module docstring)."""
    loaded = models.load_model(base_model, config.device)
    model = loaded.model
    if adapter is not None:
        model = adapters.load_adapter(model, adapter).merge_and_unload()
        model.eval()
    return Runtime(TransformersBackend(model, loaded.tokenizer, loaded.device), loaded.tokenizer,
                   f"{loaded.path}{' + ' + adapter + ' (merged)' if adapter else ''} on transformers ({loaded.device})")


TASK_RESULT_FIELDS = frozenset(item.name for item in fields(TaskResult))


def model_report(results: ModelResults, resamples: int, seed: int) -> dict[str, Any]:
    # Rows carry the gate's own keys (`batch`) beside a TaskResult's.
    heldout = [TaskResult(**{k: v for k, v in row.items() if k in TASK_RESULT_FIELDS}) for row in results[HELDOUT]]
    regression = [TaskResult(**{k: v for k, v in row.items() if k in TASK_RESULT_FIELDS})
                  for row in results[REGRESSION]]
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
    events: EventStream, measurement: Mapping[str, Any] | None = None,
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
        "measurement": dict(measurement or {}),
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
