"""The trainer's side of the job protocol: load the spec, emit events, stop cleanly on SIGTERM.

`run_job` wraps one job kind's body: it loads and checks `run.json`, keeps stdout for
protocol events only (anything else printed goes to stderr), turns SIGTERM into a stop
request the body polls, and guarantees that every run ends with a `done` event and exit
code 0, or an `error` event and a non-zero exit (1 on failure, 143 when stopped by SIGTERM).
The configs and their parsing are `trainer.spec`; what each job computes lives in its own
module (`trainer.evaluate` for `eval`, `trainer.sft`, `trainer.grpo`, `trainer.gate`, `trainer.mine`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from trainer.contracts import PARENT_PID_ENV, ContractError, DoneEvent, ErrorEvent, JobEvent, RunSpec
from trainer.spec.config import JobError, SpecError

EXIT_FAILED = 1
EXIT_STOPPED = 128 + signal.SIGTERM
_PR_SET_PDEATHSIG = 1


class JobStopped(JobError):
    kind = "stopped"

    def __init__(self, message: str = "stopped by SIGTERM before finishing") -> None:
        super().__init__(message)


class EventStream:
    """Writes one JSON event per line and flushes it, so the reader sees each event at once.

    Without a stream (a process other than the main one of a multi-process launch) events are dropped:
    the worker reads one process's events, the main one's.
    """

    def __init__(self, stream: IO[str] | None) -> None:
        self._stream = stream

    def emit(self, event: JobEvent) -> None:
        if self._stream is None:
            return
        self._stream.write(json.dumps(event.to_json(), ensure_ascii=False, allow_nan=False) + "\n")
        self._stream.flush()


def is_main_process() -> bool:
    """Whether this is the main process (rank 0) of an `accelerate launch` / torchrun, or a lone process."""
    return os.environ.get("RANK", "0") == "0"


class StopFlag:
    """Set when SIGTERM arrives; long loops poll it between (and inside) batches."""

    def __init__(self) -> None:
        self.requested = False

    def request(self) -> None:
        self.requested = True

    def raise_if_requested(self) -> None:
        if self.requested:
            raise JobStopped()


@contextmanager
def protocol_stdout() -> Iterator[EventStream]:
    """Events go to the real stdout; file descriptor 1 points at stderr meanwhile.

    Libraries print progress and warnings (some from C code, below `sys.stdout`); sending
    all of that to stderr keeps the event stream one JSON object per line.
    """
    sys.stdout.flush()
    events_fd = os.dup(1)
    saved_stdout = sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    events = os.fdopen(events_fd, "w", encoding="utf-8", closefd=True)
    try:
        yield EventStream(events if is_main_process() else None)
    finally:
        events.flush()
        sys.stdout = saved_stdout
        os.dup2(events.fileno(), 1)
        events.close()


@contextmanager
def stop_on_sigterm(flag: StopFlag) -> Iterator[StopFlag]:
    """Within the block SIGTERM sets `flag` instead of killing the process."""
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: flag.request())
    try:
        yield flag
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent() -> None:
    """Ask Linux to send SIGTERM when the parent (the worker) dies; a no-op elsewhere.

    A parent that died before this call would go unnoticed, so when the worker named its pid in
    FLYWHEEL_PARENT_PID and this process has been handed to another parent since, it exits now:
    nobody is left to read its events, and the reaper runs the job again.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    expected = os.environ.get(PARENT_PID_ENV, "")
    if expected.isdigit() and os.getppid() != int(expected):
        sys.exit(f"the process that started this job ({expected}) is gone; stopping")


def load_spec(path: str | Path, kind: str) -> RunSpec:
    """The RunSpec in `path`, checked to be of `kind`, with paths resolved against its folder."""
    spec_path = Path(path)
    try:
        data = json.loads(spec_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {spec_path}") from None
    except json.JSONDecodeError as error:
        raise SpecError(f"spec {spec_path} is not valid JSON: {error.msg} at line {error.lineno}") from None
    if not isinstance(data, dict):
        raise SpecError(f"spec {spec_path} must be a JSON object")
    try:
        spec = RunSpec.from_json(data)
    except ContractError as error:
        raise SpecError(f"spec {spec_path}: {error}") from None
    if spec.kind != kind:
        raise SpecError(f"spec {spec_path} is for a {spec.kind!r} job, not {kind!r}")
    return resolved_paths(spec, spec_path.resolve().parent)


def resolved_paths(spec: RunSpec, base: Path) -> RunSpec:
    """The spec with relative file paths made absolute against `base`.

    The base model is resolved only when it names something under `base`, since a bare
    name such as `demo` or `org/model` is a model name, not a path.
    """
    model = base / spec.base_model
    return dataclasses.replace(
        spec,
        base_model=_normal(model) if _is_relative_path(spec.base_model) or model.exists() else spec.base_model,
        task_paths=[_normal(base / path) for path in spec.task_paths],
        heldout_paths=[_normal(base / path) for path in spec.heldout_paths],
        regression_paths=[_normal(base / path) for path in spec.regression_paths],
        output_dir=_normal(base / spec.output_dir),
        adapter=_normal(base / spec.adapter) if spec.adapter else None,
    )


def _normal(path: Path) -> str:
    return os.path.normpath(path)


def _is_relative_path(name: str) -> bool:
    return name.startswith(("./", "../"))


JobBody = Callable[[RunSpec, EventStream, StopFlag], DoneEvent]


def run_job(spec_path: str | Path, kind: str, body: JobBody) -> int:
    """Run `body` under the protocol; the exit code is 0, EXIT_FAILED or EXIT_STOPPED."""
    flag = StopFlag()
    with protocol_stdout() as events, stop_on_sigterm(flag):
        try:
            spec = load_spec(spec_path, kind)
            events.emit(body(spec, events, flag))
            return 0
        except JobStopped as stopped:
            events.emit(ErrorEvent(str(stopped), JobStopped.kind))
            return EXIT_STOPPED
        except JobError as error:
            events.emit(ErrorEvent(str(error), error.kind))
            return EXIT_FAILED
        except Exception as error:  # noqa: BLE001 - the protocol promises an error event, never a bare traceback
            traceback.print_exc(file=sys.stderr)
            events.emit(ErrorEvent(f"{type(error).__name__}: {error}", "internal"))
            return EXIT_FAILED
