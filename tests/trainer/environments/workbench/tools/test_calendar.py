"""The calendar tools behave as NeMo Gym's workplace assistant's do, on WorkBench's events."""

from __future__ import annotations

import pytest

from trainer.environments.workbench.tools import ToolError
from trainer.environments.workbench.tools.calendar import (
    create_event,
    delete_event,
    get_event_information_by_id,
    search_events,
    update_event,
)


def test_a_lookup_returns_the_one_field_asked_for(state):
    assert get_event_information_by_id(state, "00000013", "event_name") == {"event_name": "sync up"}


@pytest.mark.parametrize(
    ("event_id", "field", "message"),
    [
        ("", "event_name", "Event ID not provided."),
        ("13", "event_name", "Invalid event ID format. Expected 8-digit ID."),
        ("00000013", "event_end", "Invalid field. Available fields are: event_id, event_name"),
        ("00009999", "event_name", "Event not found."),
    ],
)
def test_a_bad_lookup_is_refused_with_workbenchs_message(state, event_id, field, message):
    with pytest.raises(ToolError, match=message):
        get_event_information_by_id(state, event_id, field)


def test_a_search_matches_name_or_address_case_insensitively_latest_first(state):
    found = search_events(state, query="LUIS.ORTIZ")
    starts = [event["event_start"] for event in found["events"]]
    assert starts == sorted(starts, reverse=True) and len(starts) == 5
    assert all("luis.ortiz" in event["participant_email"] for event in found["events"])
    assert found["pagination"]["page"] == 1 and found["pagination"]["total_events"] >= 5


def test_a_search_bounds_the_start_time_and_pages(state):
    day = {"time_min": "2023-12-13 00:00:00", "time_max": "2023-12-13 23:59:59", "page_size": 3}
    first, last, past_the_end = (search_events(state, page=page, **day) for page in (1, 2, 9))
    assert [event["event_id"] for event in first["events"]] == ["00000152", "00000120", "00000100"]
    assert [event["event_id"] for event in last["events"]] == ["00000256"]  # the day's first meeting, listed last
    assert last["pagination"] == {"total_events": 4, "page": 2, "page_size": 3, "total_pages": 2}
    assert past_the_end == last
    assert search_events(state, query="no meeting is called this") == "No events found."


def test_a_search_with_an_unreadable_time_is_refused(state):
    with pytest.raises(ToolError, match="Invalid time_min format"):
        search_events(state, time_min="next tuesday")


def test_creating_an_event_stores_a_lower_cased_address_under_the_next_id(state):
    assert create_event(state, "Review", "Nia.Johnson@Atlas.com", "2023-12-01 10:00:00", "30") == "00000300"
    assert dict(state.calendar.get("00000300")) == {
        "event_id": "00000300",
        "event_name": "Review",
        "participant_email": "nia.johnson@atlas.com",
        "event_start": "2023-12-01 10:00:00",
        "duration": "30",
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"participant_email": "a@b.com", "event_start": "2023-12-01 10:00:00", "duration": "30"}, "name not"),
        ({"event_name": "x", "participant_email": "a@b.com", "event_start": "soon", "duration": "30"}, "event_start"),
        (
            {"event_name": "x", "participant_email": "a@b.com", "event_start": "2023-12-01 10:00:00", "duration": "-5"},
            "positive",
        ),
        (
            {"event_name": "x", "participant_email": "a@b.com", "event_start": "2023-12-01 10:00:00", "duration": "1h"},
            "Invalid duration",
        ),
    ],
)
def test_an_incomplete_or_invalid_event_is_not_created(state, arguments, message):
    with pytest.raises(ToolError, match=message):
        create_event(state, **arguments)
    assert state.calendar.get("00000300") is None


def test_deleting_an_event_removes_it_and_a_second_delete_finds_nothing(state):
    assert delete_event(state, "00000256") == "Event deleted successfully."
    with pytest.raises(ToolError, match="Event not found."):
        delete_event(state, "00000256")


def test_updating_an_event_changes_that_field_only(state):
    before = dict(state.calendar.get("00000256"))
    assert update_event(state, "00000256", "participant_email", "Raj.Patel@atlas.com") == "Event updated successfully."
    assert dict(state.calendar.get("00000256")) == {**before, "participant_email": "raj.patel@atlas.com"}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("event_id", "00000001", "Invalid field"), ("duration", "0", "positive"), ("event_start", "noon", "format")],
)
def test_an_invalid_update_is_refused(state, field, value, message):
    with pytest.raises(ToolError, match=message):
        update_event(state, "00000256", field, value)
