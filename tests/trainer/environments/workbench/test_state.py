"""Episode state: copy-on-write over the shared rows, ids handed out as WorkBench does."""

from __future__ import annotations

from trainer.environments.workbench.state import WorkbenchState


def test_a_fresh_state_shares_the_starting_rows_without_copying_them(state, workbench_data):
    assert state.calendar.get("00000013") is workbench_data.tables["calendar_events"].rows["00000013"]


def test_an_update_replaces_only_that_row_and_leaves_the_shared_data_alone(state, workbench_data):
    shared = workbench_data.tables["calendar_events"].rows["00000013"]
    state.calendar.update("00000013", "event_name", "renamed")
    assert state.calendar.get("00000013")["event_name"] == "renamed"
    assert shared["event_name"] == "sync up"
    assert WorkbenchState.fresh(workbench_data).calendar.get("00000013") is shared


def test_a_delete_in_one_episode_is_invisible_to_the_next(state, workbench_data):
    state.emails.delete("00000259")
    assert state.emails.get("00000259") is None
    assert WorkbenchState.fresh(workbench_data).emails.get("00000259") is not None


def test_a_new_row_gets_the_largest_id_plus_one_with_every_column(state):
    assert state.customers.insert({"customer_name": "Dakota Thomas"}) == "00000200"
    row = state.customers.get("00000200")
    assert tuple(row) == state.customers.columns and row["notes"] is None


def test_a_reused_starting_id_names_a_new_row(state):
    state.calendar.delete("00000299")
    assert state.calendar.insert({"event_name": "new"}) == "00000299"
    assert not state.calendar.is_starting_row("00000299")
    assert state.calendar.is_starting_row("00000298")


def test_the_tables_record_which_ids_they_touched(state):
    state.calendar.update("00000013", "duration", "30")
    state.calendar.delete("00000256")
    plot = state.plots.insert({"file_path": "plots/x.png"})
    assert state.calendar.touched == {"00000013", "00000256"} and state.plots.touched == {plot}
