"""The `synth` job: a local model paraphrases seed tasks' requests, and the variants are screened.

`python -m trainer synth --spec run.json` reads the seed tasks (`task_paths`, the agent's train
tasks) and the held-out tasks (`heldout_paths`, read only for the near-duplicate guard, never
answered or scored), loads the spec's base model (plus adapter), samples `paraphrases` rewrites
of each request (`trainer.spec.synth`), and screens the variants with the filters of
`trainer.spec.synthetic` under the verifier and safety policy of the spec, playing each
variant's expected calls in the config's `environment` where it names one that can judge them
(`trainer.spec.synthetic.EnvironmentFilter`; the report says when it does not apply). Writes
`variants.jsonl` (one line per variant: its task, seed, method, change and the filter that
rejected it, or none) and ends with a done event whose metrics are the batch's counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer.contracts import DoneEvent, LogEvent, MetricEvent, RunSpec, Task
from trainer.evaluate import execution_environment
from trainer.jobs import EventStream, StopFlag
from trainer.rollout import GenerationHooks, open_runtime
from trainer.spec.config import config_from_json
from trainer.spec.eval import safety_policy
from trainer.spec.synth import SynthConfig, model_variants, paraphrase_task
from trainer.spec.synthetic import NO_ENVIRONMENT, EnvironmentFilter, Screened, Variant, counts, screen
from trainer.spec.tasks import load_tasks
from trainer.verifiers import get_verifier


def variant_line(item: Screened) -> dict[str, Any]:
    variant, rejection = item.variant, item.rejection
    return {"task": variant.task.to_json(), "seed_id": variant.seed_id, "method": variant.method,
            "change": variant.change, "rejected_by": rejection.filter if rejection else "",
            "reason": rejection.reason if rejection else ""}  # fmt: skip


def run(spec: RunSpec, events: EventStream, stop: StopFlag) -> DoneEvent:
    """The `synth` job of the protocol."""
    config = config_from_json(SynthConfig, spec.hyperparameters, "synth hyperparameters")
    seeds = [task for task in load_tasks(spec.task_paths) if task.episode is None]
    heldout = load_tasks(spec.heldout_paths) if spec.heldout_paths else []
    policy = safety_policy(None, spec.safety_policy)
    environment = execution_environment(config.environment, policy)  # before the model: a missing sandbox fails fast
    playing = EnvironmentFilter.of(str(config.environment), environment) if environment else NO_ENVIRONMENT
    try:
        variants = _paraphrased(spec, config, seeds, events, stop)
        screened = screen(variants, verifier=get_verifier(config.verifier, policy), train=seeds, heldout=heldout,
                          threshold=config.threshold, heldout_threshold=config.heldout_threshold,
                          environment=playing)  # fmt: skip
    finally:
        if environment is not None:
            environment.close()
    output = Path(spec.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    path = output / "variants.jsonl"
    path.write_text("".join(json.dumps(variant_line(item), ensure_ascii=False) + "\n" for item in screened))
    report = counts(screened, playing)
    for name, value in [("generated", report["generated"]), ("accepted", report["accepted"]),
                        *((f"rejected/{name}", total) for name, total in report["rejected"].items())]:  # fmt: skip
        events.emit(MetricEvent(step=0, name=name, value=float(value)))
    return DoneEvent(metrics=report, results=str(path), files={"variants": str(path)})


def _paraphrased(spec: RunSpec, config: SynthConfig, seeds: list[Task], events: EventStream,
                 stop: StopFlag) -> list[Variant]:  # fmt: skip
    events.emit(LogEvent(f"paraphrasing {len(seeds)} seed request(s) on {spec.base_model}"))
    runtime = open_runtime(spec.base_model, spec.adapter, config.backend, config.device, spec.seed)
    prompts = [runtime.render(paraphrase_task(seed)) for seed in seeds]
    generations = runtime.backend.generate(prompts, config.sampling(spec.seed),
                                           GenerationHooks(should_stop=lambda: stop.requested))  # fmt: skip
    return model_variants(seeds, [[sample.text for sample in samples] for samples in generations])
