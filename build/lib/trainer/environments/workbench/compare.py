"""The end-state check: are two sandboxes' tables the same, and if not, where do they first differ?

The rules follow WorkBench's and NeMo Gym's workplace assistant's checks:
- text is compared case-insensitively, except `status`, `list_name` and `board`, whose case
  matters (WorkBench's CASE_SENSITIVE_FIELDS); an empty value equals a missing one;
- row order does not matter (WorkBench compares the tables as sets of rows);
- a starting row is matched by its id, so editing or deleting the wrong one shows;
- a row made during the episode is matched by its content without its id: ids are handed
  out in creation order, so two correct answers that create in different orders get
  different ids (NeMo Gym's current check treats generated ids the same way).
This module compares states; executing calls is `trainer.environments.workbench.environment`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from trainer.environments.workbench.data import Row
from trainer.environments.workbench.state import Table, WorkbenchState

CASE_SENSITIVE_COLUMNS = frozenset({"status", "list_name", "board"})
_SHOWN_CHARACTERS = 60

Content = tuple[tuple[str, str | None], ...]


def state_differences(actual: WorkbenchState, expected: WorkbenchState) -> Iterator[str]:
    """Each difference between the two end states as a sentence, table by table; none when equal."""
    for name, expected_table in expected.tables.items():
        yield from table_differences(actual.tables[name], expected_table)


def table_differences(actual: Table, expected: Table) -> Iterator[str]:
    # A row neither episode touched is the same shared starting row in both: only touched ids can differ.
    touched = sorted(actual.touched | expected.touched)
    actual_kept, expected_kept = _starting_rows(actual, touched), _starting_rows(expected, touched)
    for row_id in touched:
        if row_id in expected_kept and row_id not in actual_kept:
            yield f"{expected.name}: row {row_id} was deleted; the expected end state keeps it"
        elif row_id in actual_kept and row_id not in expected_kept:
            yield f"{expected.name}: row {row_id} is still there; the expected end state deletes it"
        elif row_id in actual_kept:
            yield from _row_differences(expected.name, row_id, actual_kept[row_id], expected_kept[row_id])
    yield from _new_row_differences(actual, expected, touched)


def _starting_rows(table: Table, ids: list[str]) -> dict[str, Row]:
    return {row_id: table.rows[row_id] for row_id in ids if row_id in table.rows and table.is_starting_row(row_id)}


def _row_differences(table: str, row_id: str, actual: Row, expected: Row) -> Iterator[str]:
    for column, expected_value in expected.items():
        got, wanted = normalised(column, actual.get(column)), normalised(column, expected_value)
        if got != wanted:
            yield f"{table}: row {row_id} has {column} {_shown(got)}, expected {_shown(wanted)}"


def _new_row_differences(actual: Table, expected: Table, touched: list[str]) -> Iterator[str]:
    actual_new, expected_new = _new_rows(actual, touched), _new_rows(expected, touched)
    for content in (expected_new - actual_new).elements():
        yield f"{expected.name}: an expected new row is missing: {_described(content)}"
    for content in (actual_new - expected_new).elements():
        yield f"{expected.name}: an unexpected new row: {_described(content)}"


def _new_rows(table: Table, ids: list[str]) -> Counter[Content]:
    return Counter(
        tuple(
            (column, normalised(column, value))
            for column, value in table.rows[row_id].items()
            if column != table.id_column
        )
        for row_id in ids
        if row_id in table.rows and not table.is_starting_row(row_id)
    )


def normalised(column: str, value: str | None) -> str | None:
    """A cell as the comparison sees it: lower-cased unless its case matters; empty as None."""
    if value is None or value == "":
        return None
    return value if column in CASE_SENSITIVE_COLUMNS else value.lower()


def _described(content: Content) -> str:
    return ", ".join(f"{column}={_shown(value)}" for column, value in content if value is not None)


def _shown(value: str | None) -> str:
    if value is None:
        return "empty"
    text = value if len(value) <= _SHOWN_CHARACTERS else value[: _SHOWN_CHARACTERS - 3] + "..."
    return repr(text)
