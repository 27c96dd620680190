"""One episode's sandbox: copy-on-write tables over the shared WorkBench data.

A Table starts as a copy of its base table's index (id to row), not of the rows: the rows
stay the shared read-only mappings until a tool changes one, and then that row alone is
replaced by a new mapping. Starting an episode therefore costs one dictionary copy per table.
A Table also remembers which ids it touched (inserted, updated or deleted), so that the judge
compares only those, and which starting rows it deleted: a starting id that is deleted and
then handed out again (ids are the largest one plus one, as WorkBench makes them) names a
new row, not the old one, and the judge treats it so.

The plots table (one file path a row) has no id column in WorkBench; here its rows get
running keys that are never starting ids. Tools and the judge are elsewhere
(`tools/`, `compare.py`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from trainer.environments.workbench.data import BaseTable, Row, Visit, WorkbenchData

ID_WIDTH = 8
PLOTS = "plots"
PLOT_COLUMNS = ("file_path",)


@dataclass
class Table:
    """A sandbox table in an episode; change it only through these methods."""

    name: str
    id_column: str | None
    columns: tuple[str, ...]
    rows: dict[str, Row]
    starting_ids: frozenset[str] = frozenset()
    deleted: set[str] = field(default_factory=set)
    touched: set[str] = field(default_factory=set)

    @classmethod
    def fresh(cls, base: BaseTable) -> Table:
        return cls(base.name, base.id_column, base.columns, dict(base.rows), base.ids)

    def get(self, row_id: str) -> Row | None:
        return self.rows.get(row_id)

    def values(self) -> Iterator[Row]:
        return iter(self.rows.values())

    def next_id(self) -> str:
        """The id a new row gets: the largest id plus one, zero-padded to eight digits."""
        largest = max((int(row_id) for row_id in self.rows), default=-1)
        return str(largest + 1).zfill(ID_WIDTH)

    def insert(self, values: Mapping[str, str | None]) -> str:
        """Add a row (missing columns are None) and return its id."""
        row_id = self.next_id() if self.id_column else str(len(self.rows) + len(self.deleted))
        row = {column: values.get(column) for column in self.columns}
        if self.id_column:
            row[self.id_column] = row_id
        self.rows[row_id] = MappingProxyType(row)
        self.touched.add(row_id)
        return row_id

    def update(self, row_id: str, column: str, value: str | None) -> None:
        self.rows[row_id] = MappingProxyType({**self.rows[row_id], column: value})
        self.touched.add(row_id)

    def delete(self, row_id: str) -> None:
        del self.rows[row_id]
        self.deleted.add(row_id)
        self.touched.add(row_id)

    def is_starting_row(self, row_id: str) -> bool:
        """Whether the row under this id is still the one the episode started with (maybe edited)."""
        return row_id in self.starting_ids and row_id not in self.deleted


@dataclass
class WorkbenchState:
    """The five changeable tables of one episode, and the read-only analytics and directory."""

    tables: dict[str, Table]
    visits: tuple[Visit, ...]
    directory: tuple[str, ...]

    @classmethod
    def fresh(cls, data: WorkbenchData) -> WorkbenchState:
        tables = {name: Table.fresh(base) for name, base in data.tables.items()}
        tables[PLOTS] = Table(PLOTS, None, PLOT_COLUMNS, {})
        return cls(tables=tables, visits=data.visits, directory=data.directory)

    @property
    def calendar(self) -> Table:
        return self.tables["calendar_events"]

    @property
    def emails(self) -> Table:
        return self.tables["emails"]

    @property
    def project_tasks(self) -> Table:
        return self.tables["project_tasks"]

    @property
    def customers(self) -> Table:
        return self.tables["customer_relationship_manager_data"]

    @property
    def plots(self) -> Table:
        return self.tables[PLOTS]
