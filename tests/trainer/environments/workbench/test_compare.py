"""The end-state comparison: which differences count, and how each is reported."""

from __future__ import annotations

from trainer.environments.workbench.compare import normalised, state_differences
from trainer.environments.workbench.state import WorkbenchState


def differences(actual, expected):
    return list(state_differences(actual, expected))


def test_two_untouched_states_are_equal(workbench_data):
    assert differences(WorkbenchState.fresh(workbench_data), WorkbenchState.fresh(workbench_data)) == []


def test_text_case_is_ignored_except_where_it_matters(workbench_data):
    actual, expected = WorkbenchState.fresh(workbench_data), WorkbenchState.fresh(workbench_data)
    actual.calendar.update("00000013", "event_name", "SYNC UP")
    assert differences(actual, expected) == []
    actual.customers.update("00000014", "status", "qualified")
    assert differences(actual, expected) == [
        "customer_relationship_manager_data: row 00000014 has status 'qualified', expected 'Qualified'"
    ]


def test_an_empty_value_equals_a_missing_one():
    assert normalised("notes", "") is None and normalised("notes", None) is None
    assert normalised("board", "Front end") == "Front end" and normalised("task_name", "Fix It") == "fix it"


def test_new_rows_match_by_content_whatever_order_made_them(workbench_data):
    actual, expected = WorkbenchState.fresh(workbench_data), WorkbenchState.fresh(workbench_data)
    for path in ("plots/a.png", "plots/b.png"):
        expected.plots.insert({"file_path": path})
    for path in ("plots/b.png", "plots/a.png"):
        actual.plots.insert({"file_path": path})
    actual.calendar.insert({"event_name": "one"})
    actual.calendar.insert({"event_name": "two"})
    expected.calendar.insert({"event_name": "two"})
    expected.calendar.insert({"event_name": "one"})
    assert differences(actual, expected) == []


def test_a_missing_and_an_unexpected_new_row_are_both_reported(workbench_data):
    actual, expected = WorkbenchState.fresh(workbench_data), WorkbenchState.fresh(workbench_data)
    expected.plots.insert({"file_path": "plots/right.png"})
    actual.plots.insert({"file_path": "plots/wrong.png"})
    assert differences(actual, expected) == [
        "plots: an expected new row is missing: file_path='plots/right.png'",
        "plots: an unexpected new row: file_path='plots/wrong.png'",
    ]


def test_a_deleted_and_recreated_starting_row_is_not_the_starting_row(workbench_data):
    actual, expected = WorkbenchState.fresh(workbench_data), WorkbenchState.fresh(workbench_data)
    original = dict(actual.calendar.get("00000299"))
    actual.calendar.delete("00000299")
    actual.calendar.insert(original)
    assert (
        differences(actual, expected)[0] == "calendar_events: row 00000299 was deleted; the expected end state keeps it"
    )


def test_long_values_are_shortened_in_the_report(workbench_data):
    actual, expected = WorkbenchState.fresh(workbench_data), WorkbenchState.fresh(workbench_data)
    actual.emails.update("00000259", "body", "x" * 200)
    [difference] = differences(actual, expected)
    assert "..." in difference and len(difference) < 250
