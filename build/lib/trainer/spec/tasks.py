"""Task files: read them, hash them, sample them, write them.

A task file is JSONL, one `trainer.contracts.Task` a line (what the app's snapshots export as
"native"). `read_task_files` reads them strictly (the first bad line is a SpecError naming it) or
leniently (bad lines are skipped and listed with their file, line and reason; jobs read this way
unless their `strict_tasks` is set). Either way a missing file, or files without one usable task,
is a SpecError. A snapshot's identity is the sha256 of its files' bytes, skipped lines included.
Samples are seeded and keep file order; `stratified_sample` is the one stratified sampler, used by
the app's snapshots (by bucket or category) and by the gate (by bucket).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from trainer.contracts import ContractError, DoneEvent, LogEvent, Task
from trainer.spec.config import SpecError

ItemT = TypeVar("ItemT")
SKIPPED_TASKS = "skipped_tasks"
"""The key of a done event's metrics that lists the task lines a job skipped."""
SKIPPED_SHOWN = 5


@dataclass(frozen=True)
class SkippedLine:
    """A task line that was not loaded: its file (name only), its line number and why."""

    file: str
    line: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class TaskFiles:
    """The tasks read from task files, in order, and the lines skipped on the way."""

    tasks: list[Task]
    skipped: list[SkippedLine] = field(default_factory=list)


def read_task_files(paths: Sequence[str], *, strict: bool) -> TaskFiles:
    """The tasks in JSONL files; a bad line is a SpecError when `strict`, else skipped and listed.

    A missing file is a SpecError either way, and so are files that hold no usable task.
    """
    tasks, skipped = read_jsonl(paths, task_from_line, strict=strict,
                                empty="the task snapshot is empty: no usable task")  # fmt: skip
    return TaskFiles(tasks, skipped)


def read_jsonl(
    paths: Sequence[str], parse: Callable[[str], ItemT], *, strict: bool, empty: str, file: str = "task file"
) -> tuple[list[ItemT], list[SkippedLine]]:
    """Each line of the files parsed; a line `parse` refuses (ContractError) is a SpecError when `strict`,
    else skipped and listed. No usable line at all is a SpecError starting with `empty`."""
    items: list[ItemT] = []
    skipped: list[SkippedLine] = []
    for path in paths:
        for number, line in _lines(path, file):
            try:
                items.append(parse(line))
            except ContractError as error:
                if strict:
                    raise SpecError(f"{path}:{number}: {error}") from None
                skipped.append(SkippedLine(Path(path).name, number, str(error)))
    if not items:
        shown = "; ".join(str(line) for line in skipped[:SKIPPED_SHOWN])
        raise SpecError(f"{empty} in {', '.join(paths) or 'no file given'}"
                        + (f" ({len(skipped)} bad line(s) skipped: {shown})" if skipped else ""))
    return items, skipped


def load_tasks(paths: Sequence[str]) -> list[Task]:
    """The tasks in JSONL files, in order; a missing file or a bad line is a SpecError naming it."""
    return read_task_files(paths, strict=True).tasks


def _lines(path: str, file: str = "task file") -> list[tuple[int, str]]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise SpecError(f"{file} not found: {path}") from None
    return [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]


def task_from_line(line: str) -> Task:
    """The Task one line of a task file holds, as every job reads it; a ContractError says why not."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        raise ContractError(f"invalid JSON: {error.msg}") from None
    if not isinstance(data, dict):
        raise ContractError(f"a task must be a JSON object, got {type(data).__name__}")
    try:
        return Task.from_json(data)
    except (TypeError, AttributeError) as error:  # a field of the wrong shape deeper than the contract checks
        raise ContractError(f"task {data.get('id')}: not a task: {error}") from None


def skipped_warning(skipped: Sequence[SkippedLine], what: str = "task") -> LogEvent | None:
    """The job's warning line for skipped task lines (how many, the first reasons); None when none were."""
    if not skipped:
        return None
    shown = "; ".join(str(line) for line in skipped[:SKIPPED_SHOWN])
    more = f"; and {len(skipped) - SKIPPED_SHOWN} more" if len(skipped) > SKIPPED_SHOWN else ""
    return LogEvent(f"skipped {len(skipped)} bad {what} line(s) (set strict_tasks to refuse them instead): "
                    f"{shown}{more}", level="warning")


def with_skipped(done: DoneEvent, skipped: Sequence[SkippedLine]) -> DoneEvent:
    """`done` with `skipped_tasks` (the count and the first lines) in its metrics when any line was skipped."""
    if not skipped:
        return done
    report = {"count": len(skipped), "first": [line.to_json() for line in skipped[:SKIPPED_SHOWN]]}
    return dataclasses.replace(done, metrics={**done.metrics, SKIPPED_TASKS: report})


def write_tasks(path: Path, tasks: Sequence[Task]) -> None:
    """`tasks` as a task file at `path` (its folder made if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(task.to_json_line() + "\n" for task in tasks), encoding="utf-8")


def snapshot_sha256(paths: Sequence[str]) -> str:
    """The sha256 of the task files' bytes, in order: the snapshot's identity."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def seeded_sample(items: Sequence[ItemT], size: int | None, seed: int) -> list[ItemT]:
    """`size` items drawn with `seed`, kept in order; all of them when size is None or too big."""
    if size is None or size >= len(items):
        return list(items)
    chosen = sorted(random.Random(seed).sample(range(len(items)), size))
    return [items[index] for index in chosen]


def stratified_sample(items: Sequence[ItemT], size: int | None, seed: int,
                      stratum: Callable[[ItemT], str]) -> list[ItemT]:
    """`size` items, each stratum keeping its share (largest remainders), seeded, kept in order."""
    if size is None or size >= len(items):
        return list(items)
    groups: dict[str, list[int]] = defaultdict(list)
    for index, item in enumerate(items):
        groups[stratum(item)].append(index)
    total = len(items)
    quotas = {name: size * len(members) // total for name, members in groups.items()}
    by_remainder = sorted(groups, key=lambda name: (-(size * len(groups[name]) % total), name))
    for name in by_remainder[: size - sum(quotas.values())]:
        quotas[name] += 1
    rng = random.Random(seed)
    chosen = sorted(index for name in sorted(groups) for index in rng.sample(groups[name], quotas[name]))
    return [items[index] for index in chosen]


def task_bucket(task: Task) -> str:
    """A task's failure bucket, the gate's stratum ('' for none)."""
    return task.metadata.bucket or ""


def last_user_text(task: Task) -> str:
    """The task's last user message: the request, shown instead of the whole rendered prompt."""
    for message in reversed(task.messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""
