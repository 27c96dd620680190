"""A team's own environment, named by a Python entry point: `package.module:factory`.

The factory is called with the agent's safety policy as its one keyword (`factory(policy=...)`)
and returns a `trainer.environments.base.Environment`; TRL's `environment_factory` has the same
shape. Everything that can go wrong in finding and building it (no such module, no such
attribute, an import that raises, a factory that raises or returns something else) is an
EnvironmentUnavailable naming the entry point, raised before any episode starts.

Once built, the team's code cannot stop a job: the environment comes wrapped in a
TimedEnvironment, whose `reset`, `step`, `judge` and `close` each run on the episode's own
worker thread and must return within `call_timeout_s`, or raise TimeoutError ("environment
step timed out after N s"), which ends that episode as an environment error
(`trainer.episodes`). Python cannot kill a thread: a call that overruns is abandoned, still
running, on its daemon thread (a daemon does not hold up the process's exit), every later
call of that episode fails at once, and its environment is never closed (the thread still
holds it). An exception from the team's code stays an exception: `trainer.episodes` ends the
episode with it.
"""

from __future__ import annotations

import contextlib
import importlib
import queue
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from trainer.contracts import Task, ToolCall
from trainer.environments.base import Environment, Judgement, StepResult
from trainer.spec.environments import ENTRY_POINT
from trainer.verifiers.safety import SafetyPolicy

CALL_TIMEOUT_S = 30.0
_T = TypeVar("_T")


class EnvironmentUnavailable(ValueError):
    """The named environment cannot be built; the message says why."""


def is_entry_point(name: str) -> bool:
    return bool(ENTRY_POINT.match(name))


def load_environment(entry_point: str, policy: SafetyPolicy, call_timeout_s: float = CALL_TIMEOUT_S) -> Environment:
    """The environment `entry_point`'s factory builds for `policy`, each call of it timed (`TimedEnvironment`)."""
    module_name, _, attribute = entry_point.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - an import of the team's code may raise anything; say what
        raise EnvironmentUnavailable(
            f"environment {entry_point}: cannot import {module_name}: {type(error).__name__}: {error}"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise EnvironmentUnavailable(f"environment {entry_point}: {module_name} has no {attribute}")
        target = getattr(target, part)
    if not callable(target):
        raise EnvironmentUnavailable(f"environment {entry_point}: {attribute} is not callable")
    try:
        built = target(policy=policy)
    except Exception as error:  # noqa: BLE001 - the factory is the team's code
        raise EnvironmentUnavailable(
            f"environment {entry_point}: its factory raised {type(error).__name__}: {error}"
        ) from None
    if not isinstance(built, Environment):
        raise EnvironmentUnavailable(
            f"environment {entry_point}: its factory returned a {type(built).__name__}, "
            "not a trainer.environments.base.Environment"
        )
    return TimedEnvironment(built, call_timeout_s)


class TimedEnvironment(Environment):
    """A team's environment (`inner`) whose calls run on a worker thread of their own, each within a timeout.

    One worker per copy (`spawn`), so an episode's reset, steps and judgement all run on the same
    thread, as code holding a thread-bound handle (an sqlite connection) needs.
    """

    name: ClassVar[str] = "entry_point"

    def __init__(self, inner: Environment, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        if call_timeout_s <= 0:
            raise ValueError("call_timeout_s must be above 0")
        self.inner = inner
        self.call_timeout_s = call_timeout_s
        self._worker = _Worker()

    @property
    def floor(self) -> float:
        return self.inner.floor

    @property
    def label(self) -> str:
        return self.inner.label

    def offered_tools(self) -> list[dict[str, Any]] | None:
        return self.inner.offered_tools()

    def cannot_judge_variants(self) -> str:
        return self.inner.cannot_judge_variants()

    def spawn(self) -> TimedEnvironment:
        return TimedEnvironment(self.inner.spawn(), self.call_timeout_s)

    def reset(self, task: Task) -> None:
        self._worker.run(lambda: self.inner.reset(task), "reset", self.call_timeout_s)

    def step(self, call: ToolCall) -> StepResult:
        return self._worker.run(lambda: self.inner.step(call), "step", self.call_timeout_s)

    def judge(self) -> Judgement:
        return self._worker.run(self.inner.judge, "judge", self.call_timeout_s)

    def close(self) -> None:
        """Close the team's environment; one whose thread is stuck, or whose close overruns, is left to its thread."""
        if self._worker.stuck:
            return
        with contextlib.suppress(TimeoutError):
            self._worker.run(self.inner.close, "close", self.call_timeout_s)
        self._worker.stop()


_Job = tuple[Callable[[], Any], list[tuple[bool, Any]], threading.Event]


class _Worker:
    """A daemon thread, started on first use, that runs calls one at a time; stuck for good once one overruns."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stuck: str | None = None

    @property
    def stuck(self) -> bool:
        return self._stuck is not None

    def run(self, action: Callable[[], _T], what: str, timeout_s: float) -> _T:
        if self._stuck is not None:
            raise TimeoutError(f"environment {what} not run: its {self._stuck} timed out and is still running")
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="team environment", daemon=True)
            self._thread.start()
        outcome: list[tuple[bool, Any]] = []
        finished = threading.Event()
        self._jobs.put((action, outcome, finished))
        if not finished.wait(timeout_s):
            self._stuck = what
            raise TimeoutError(f"environment {what} timed out after {timeout_s:g} s")
        if not outcome:  # the call stopped its thread (SystemExit): the next call starts another
            self._thread = None
            raise RuntimeError(f"environment {what} ended its thread without a result")
        ok, value = outcome[0]
        if not ok:
            raise value
        result: _T = value
        return result

    def stop(self) -> None:
        if self._thread is not None and self._stuck is None:
            self._jobs.put(None)
            self._thread = None

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            action, outcome, finished = job
            try:
                outcome.append((True, action()))
            except Exception as error:  # noqa: BLE001 - handed to the caller, raised there
                outcome.append((False, error))
            finally:
                finished.set()
