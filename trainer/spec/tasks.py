"""Task files: read them, hash them, sample them, write them.

A task file is JSONL, one `trainer.contracts.Task` a line (what the app's snapshots export as
"native"). A snapshot's identity is the sha256 of its files' bytes. Samples are seeded and keep
file order; `stratified_sample` is the one stratified sampler, used by the app's snapshots (by
bucket or category) and by the gate (by bucket).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from trainer.contracts import ContractError, Task
from trainer.spec.config import SpecError

ItemT = TypeVar("ItemT")


def load_tasks(paths: Sequence[str]) -> list[Task]:
    """The tasks in JSONL files, in order; a missing file or a bad line is a SpecError naming it."""
    tasks: list[Task] = []
    for path in paths:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise SpecError(f"task file not found: {path}") from None
        for number, line in enumerate(lines, start=1):
            if line.strip():
                tasks.append(_task_from_line(line, f"{path}:{number}"))
    if not tasks:
        raise SpecError(f"the task snapshot is empty: no task in {', '.join(paths) or 'no task file given'}")
    return tasks


def _task_from_line(line: str, where: str) -> Task:
    try:
        return Task.from_json(json.loads(line))
    except json.JSONDecodeError as error:
        raise SpecError(f"{where}: invalid JSON: {error.msg}") from None
    except ContractError as error:
        raise SpecError(f"{where}: {error}") from None


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
