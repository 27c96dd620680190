"""WorkBench's starting tables, read once per folder and shared by every episode.

The folder is a copy of WorkBench's `data/`: `processed/` holds the sandbox tables
(calendar_events, emails, project_tasks, customer_relationship_manager_data, analytics_data)
and `raw/email_addresses.csv` the company directory (one address a line, no header). It is
the `data_dir` argument, else `$FLYWHEEL_WORKBENCH_DIR`, else `../shared/external/workbench`
beside the repository; a missing folder or file raises WorkbenchDataMissing, which names it.

Cells are kept as text, as WorkBench reads them (`dtype=str`); an empty cell is None, as
pandas reads it. Rows are read-only mappings: episodes copy a table's index, never its rows
(see `trainer.environments.workbench.state`). Queries and answers are not read here: tasks
come in as native Tasks.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

ENV_VAR = "FLYWHEEL_WORKBENCH_DIR"
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "external" / "workbench"

Row = Mapping[str, str | None]
Visit = Mapping[str, str | bool]

# Each sandbox table and the column that identifies its rows, in the order the judge reports them.
ID_COLUMNS = {
    "calendar_events": "event_id",
    "emails": "email_id",
    "project_tasks": "task_id",
    "customer_relationship_manager_data": "customer_id",
}
ANALYTICS_FILE = "analytics_data"
DIRECTORY_FILE = Path("raw") / "email_addresses.csv"


class WorkbenchDataMissing(FileNotFoundError):
    """The WorkBench data folder, or a file in it, is not there; the message says how to point at it."""


@dataclass(frozen=True)
class BaseTable:
    """A table as the sandbox starts: its columns, its rows by id in file order, and those ids."""

    name: str
    id_column: str
    columns: tuple[str, ...]
    rows: Mapping[str, Row]
    ids: frozenset[str]


@dataclass(frozen=True)
class WorkbenchData:
    """Everything an episode starts from; shared, never modified."""

    folder: Path
    tables: Mapping[str, BaseTable]
    visits: tuple[Visit, ...]
    directory: tuple[str, ...]


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The folder to read: the argument, else the environment variable, else the default."""
    chosen = data_dir or os.environ.get(ENV_VAR) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser().resolve()


def load_data(data_dir: str | Path | None = None) -> WorkbenchData:
    """The WorkBench tables in `data_dir` (see `resolve_data_dir`), read once per folder."""
    folder = resolve_data_dir(data_dir)
    if not folder.is_dir():
        raise WorkbenchDataMissing(
            f"WorkBench data folder {folder} not found: pass data_dir or set {ENV_VAR} to a folder "
            "holding WorkBench's processed/ and raw/ (its data/ folder)"
        )
    return _load(folder)


@lru_cache(maxsize=4)
def _load(folder: Path) -> WorkbenchData:
    tables = {name: _read_table(folder, name, id_column) for name, id_column in ID_COLUMNS.items()}
    return WorkbenchData(
        folder=folder,
        tables=MappingProxyType(tables),
        visits=tuple(_visit(row) for row in _read_rows(_file(folder, Path("processed") / f"{ANALYTICS_FILE}.csv"))),
        directory=_read_directory(_file(folder, DIRECTORY_FILE)),
    )


def _file(folder: Path, relative: Path) -> Path:
    path = folder / relative
    if not path.is_file():
        raise WorkbenchDataMissing(f"WorkBench data file {path} not found in {folder}")
    return path


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _read_table(folder: Path, name: str, id_column: str) -> BaseTable:
    path = _file(folder, Path("processed") / f"{name}.csv")
    rows = _read_rows(path)
    columns = tuple(rows[0]) if rows else ()
    by_id = {row[id_column]: MappingProxyType({key: value or None for key, value in row.items()}) for row in rows}
    # A plain dict (typed read-only) because every episode copies it, and dict copies dict fastest.
    return BaseTable(name=name, id_column=id_column, columns=columns, rows=by_id, ids=frozenset(by_id))


def _visit(row: Mapping[str, str]) -> Visit:
    # WorkBench turns user_engaged into a boolean when it loads the table; the rest stays text.
    return MappingProxyType({**row, "user_engaged": row["user_engaged"] == "True"})


def _read_directory(path: Path) -> tuple[str, ...]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(line.strip() for line in lines if line.strip())
