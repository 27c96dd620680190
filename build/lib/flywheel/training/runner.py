"""Run one attempt of a job: claim it, write its folder, start `python -m trainer <kind>`, relay its events.

The path is one-way: the `run_job` task calls `job_run` here, and this module records every state
change through `services` (claim, start, events, heartbeat, finish); services never import it.

The trainer runs in its own process group (so a cancel stops everything it started) and sets
PR_SET_PDEATHSIG itself (`trainer.jobs.die_with_parent`), so it dies with this worker. Each
attempt gets its own folder, so a requeued job never races a leftover process. Events are read
line by line on a thread and stored as they come; the heartbeat beats and the cancel flag is
checked between lines. A cancel sends SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from flywheel.datasets.exports import snapshot_lines
from flywheel.datasets.models import SnapshotKind, TaskSetSnapshot
from flywheel.training import services
from flywheel.training.models import TRAINING_KINDS, Job, JobKind
from flywheel.triage.selectors import agent_policy_json
from trainer.contracts import PARENT_PID_ENV, ContractError, LogEvent, RunSpec, event_from_json
from trainer.spec.adapters import CHECKPOINTS, last_checkpoint

STDERR_TAIL_BYTES = 8000


def attempt_dir(job: Job) -> Path:
    return Path(settings.JOB_RUNS_DIR) / str(job.id) / f"attempt-{job.attempts}"


def write_spec(job: Job, folder: Path) -> Path:
    """The attempt's run.json and the job's snapshots (or a replay's cases) as JSONL beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(
        kind=job.kind, base_model=job.base_model, task_paths=[_write_input(job, folder / "tasks.jsonl")],
        heldout_paths=[_write_tasks(job.heldout_snapshot, folder / "heldout.jsonl")] if job.heldout_snapshot else [],
        regression_paths=(
            [_write_tasks(job.regression_snapshot, folder / "regression.jsonl")] if job.regression_snapshot else []
        ),
        output_dir=str(folder / "output"), adapter=job.adapter or None, seed=int(job.hyperparameters.get("seed", 0)),
        hyperparameters={key: value for key, value in job.hyperparameters.items() if key != "seed"},
        safety_policy=agent_policy_json(job.agent_id),
    )  # fmt: skip
    if job.kind in TRAINING_KINDS and _carry_last_checkpoint(job, Path(spec.output_dir)):
        spec = dataclasses.replace(spec, hyperparameters={**spec.hyperparameters, "resume": True})
    path = folder / "run.json"
    path.write_text(json.dumps(spec.to_json(), indent=2))
    return path


def _carry_last_checkpoint(job: Job, output: Path) -> bool:
    """Copy the newest checkpoint of an earlier attempt into this attempt's output; whether there was one.

    A copy, not a shared folder: a leftover trainer of a lost attempt can never write into this one.
    """
    for attempt in range(job.attempts - 1, 0, -1):
        earlier = Path(settings.JOB_RUNS_DIR) / str(job.id) / f"attempt-{attempt}" / "output"
        checkpoint = last_checkpoint(str(earlier))
        if checkpoint is not None:
            shutil.copytree(checkpoint, output / CHECKPOINTS / Path(checkpoint).name, dirs_exist_ok=True)
            return True
    return False


def _write_input(job: Job, path: Path) -> str:
    """The job's snapshot as native task JSONL (a dpo job's: its preference pairs), or for a replay the cases
    it carries, one a line."""
    if job.kind == JobKind.DPO:
        return _write_pairs(job.task_snapshot, path.with_name("pairs.jsonl"))
    if job.snapshot is not None:
        return _write_tasks(job.snapshot, path)
    path.write_text("".join(json.dumps(case, ensure_ascii=False) + "\n" for case in job.cases), encoding="utf-8")
    return str(path)


def _write_pairs(snapshot: TaskSetSnapshot, path: Path) -> str:
    """The snapshot's preference pairs as JSONL; a ValueError, "this snapshot has no preference pairs", without."""
    if snapshot.kind != SnapshotKind.PAIRS:  # refused at launch; a job made another way still gets the reason
        raise ValueError("this snapshot has no preference pairs")
    path.write_text("".join(line + "\n" for line in snapshot_lines(snapshot, "native")), encoding="utf-8")
    return str(path)


def _write_tasks(snapshot: TaskSetSnapshot, path: Path) -> str:
    with path.open("w") as out:
        for line in snapshot_lines(snapshot, "native"):
            out.write(line + "\n")
    return str(path)


def _read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the trainer's process group, SIGKILL if it is still there after the grace period."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=settings.JOB_CANCEL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def job_run(*, job_id: Any, worker: str) -> Job | None:
    """Claim the job and run one attempt; a second delivery finds it claimed and does nothing."""
    job = services.job_claim(job_id=job_id, worker=worker)
    if job is None:
        return None
    return run_attempt(job)


def trainer_command(job: Job) -> list[str]:
    """How this job's trainer starts: in vLLM's Python when its hyperparameters choose vLLM to generate."""
    hyperparameters = job.hyperparameters or {}
    uses_vllm = hyperparameters.get("backend") == "vllm" or hyperparameters.get("generation") == "vllm"
    if uses_vllm and settings.TRAINER_VLLM_COMMAND:
        return list(settings.TRAINER_VLLM_COMMAND)
    return list(settings.TRAINER_COMMAND)


def run_attempt(job: Job) -> Job:
    folder = attempt_dir(job)
    stderr_path = folder / "stderr.log"
    try:
        spec_path = write_spec(job, folder)
    except ValueError as error:  # the snapshot holds nothing this kind reads (a dpo job's pairs)
        return services.job_not_started(job=job, reason=f"the job's input cannot be written: {error}")
    with ExitStack() as stack:
        try:
            command = [*trainer_command(job), job.kind, "--spec", str(spec_path)]
            stderr = stack.enter_context(stderr_path.open("w"))
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True, cwd=folder,
                env={**os.environ, "PYTHONUNBUFFERED": "1", PARENT_PID_ENV: str(os.getpid())},
            )  # fmt: skip
        except OSError as error:
            # No trainer runs, so no heartbeat would follow: end the attempt with the reason now instead
            # of leaving the reaper to retry it later as a lost worker.
            return services.job_not_started(job=job, reason=f"the trainer could not start: {error}")
        services.job_started(job=job, run_dir=str(folder), pid=process.pid)
        try:
            cancelled = _relay(job, process)
        except BaseException:
            _stop(process)  # the attempt is lost (the database went away, say): leave no trainer behind
            raise
    stderr_tail = stderr_path.read_bytes()[-STDERR_TAIL_BYTES:].decode(errors="replace")
    return services.job_finish(job=job, exit_code=process.returncode, stderr_tail=stderr_tail, cancelled=cancelled)


def _relay(job: Job, process: subprocess.Popen[str]) -> bool:
    """Store events until the trainer exits; True when it was stopped because of a cancel."""
    lines: queue.Queue[str | None] = queue.Queue()
    assert process.stdout is not None
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    next_beat = 0.0
    while True:
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + settings.JOB_HEARTBEAT_SECONDS
            if services.job_heartbeat(job=job):
                _stop(process)
                return True
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            process.wait()
            return False
        _store_line(job, line)


def _store_line(job: Job, line: str) -> None:
    try:
        event = event_from_json(json.loads(line))
    except (ValueError, ContractError):
        event = LogEvent(message=f"(not a protocol event) {line.strip()[:500]}", level="warning")
    services.job_event_store(job=job, event=event)
