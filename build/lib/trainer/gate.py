"""The promotion gate: does a candidate adapter beat the baseline without breaking anything?

`decide` (in `trainer.spec.decision`, torch-free, where the app reads it too) is the pure
decision over two models' per-task results on the same tasks (the held-out tasks and the
regression tasks); each criterion says why it passed or failed:
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
from trainer.spec.decision import Decision, decide, flip_rows, paired
from trainer.spec.environments import EpisodeBudget
from trainer.spec.eval import SamplingConfig, safety_policy
from trainer.spec.gate import GateConfig
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

GATE_FILE = "gate.json"
CANDIDATE_RESULTS = "candidate_results.jsonl"
BASELINE_RESULTS = "baseline_results.jsonl"
HELDOUT, REGRESSION = "heldout", "regression"


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
    return [row for name in (HELDOUT, REGRESSION) if candidate[name]
            for row in flip_rows(paired(candidate[name], baseline[name]), metric, name)]  # fmt: skip


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
