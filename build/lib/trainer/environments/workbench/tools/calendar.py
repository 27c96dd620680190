"""The calendar tools: look up, search, create, delete and update events.

Behaviour follows NeMo Gym's workplace assistant (the schemas the tasks offer): ids are
eight digits, new ids are the largest plus one, participant addresses are stored
lower-cased, a search matches its query in the event name or the participant's address
(case-insensitive) and lists the latest events first, five to a page. Both time bounds of a
search apply to the event's start, as in NeMo Gym (its schema says the lower one is the end).
"""

from __future__ import annotations

from typing import Any

from trainer.environments.workbench.data import Row
from trainer.environments.workbench.state import WorkbenchState
from trainer.environments.workbench.tools.common import (
    DEFAULT_PAGE_SIZE,
    Tool,
    ToolError,
    contains,
    paginate,
    parse_datetime,
)

EVENT_FIELDS = ("event_id", "event_name", "participant_email", "event_start", "duration")
UPDATABLE_FIELDS = EVENT_FIELDS[1:]


def get_event_information_by_id(state: WorkbenchState, event_id: str | None = None, field: str | None = None) -> Any:
    if not event_id:
        raise ToolError("Event ID not provided.")
    if not field:
        raise ToolError("Field not provided.")
    _check_id(event_id)
    if field not in EVENT_FIELDS:
        raise ToolError(f"Invalid field. Available fields are: {', '.join(EVENT_FIELDS)}")
    return {field: _event(state, event_id)[field]}


def search_events(
    state: WorkbenchState,
    query: str = "",
    time_min: str | None = None,
    time_max: str | None = None,
    page: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Any:
    earliest = parse_datetime(time_min, "time_min") if time_min else None
    latest = parse_datetime(time_max, "time_max") if time_max else None
    found = []
    for event in state.calendar.values():
        if not (contains(event["event_name"], query) or contains(event["participant_email"], query)):
            continue
        start = parse_datetime(event["event_start"] or "", "event_start")
        if (earliest is None or start >= earliest) and (latest is None or start <= latest):
            found.append((start, event))
    if not found:
        return "No events found."
    found.sort(key=lambda pair: pair[0], reverse=True)
    return paginate([event for _, event in found], "events", page, page_size)


def create_event(
    state: WorkbenchState,
    event_name: str | None = None,
    participant_email: str | None = None,
    event_start: str | None = None,
    duration: str | None = None,
) -> Any:
    if not event_name:
        raise ToolError("Event name not provided.")
    if not participant_email:
        raise ToolError("Participant email not provided.")
    if not event_start:
        raise ToolError("Event start not provided.")
    if not duration:
        raise ToolError("Event duration not provided.")
    parse_datetime(event_start, "event_start")
    _check_duration(duration)
    return state.calendar.insert(
        {
            "event_name": event_name,
            "participant_email": participant_email.lower(),
            "event_start": event_start,
            "duration": duration,
        }
    )


def delete_event(state: WorkbenchState, event_id: str | None = None) -> Any:
    if not event_id:
        raise ToolError("Event ID not provided.")
    _check_id(event_id)
    _event(state, event_id)
    state.calendar.delete(event_id)
    return "Event deleted successfully."


def update_event(
    state: WorkbenchState, event_id: str | None = None, field: str | None = None, new_value: str | None = None
) -> Any:
    if not event_id or not field or not new_value:
        raise ToolError("Event ID, field, or new value not provided.")
    _check_id(event_id)
    if field not in UPDATABLE_FIELDS:
        raise ToolError(f"Invalid field. Available fields are: {', '.join(UPDATABLE_FIELDS)}")
    if field == "event_start":
        parse_datetime(new_value, "event_start")
    if field == "duration":
        _check_duration(new_value)
    _event(state, event_id)
    state.calendar.update(event_id, field, new_value.lower() if field == "participant_email" else new_value)
    return "Event updated successfully."


def _check_id(event_id: str) -> None:
    if len(event_id) != 8 or not event_id.isdigit():
        raise ToolError("Invalid event ID format. Expected 8-digit ID.")


def _check_duration(duration: str) -> None:
    try:
        minutes = int(duration)
    except ValueError:
        raise ToolError("Invalid duration format. Expected a number of minutes.") from None
    if minutes <= 0:
        raise ToolError("Duration must be a positive number of minutes.")


def _event(state: WorkbenchState, event_id: str) -> Row:
    event = state.calendar.get(event_id)
    if event is None:
        raise ToolError("Event not found.")
    return event


TOOLS: dict[str, Tool] = {
    "calendar_get_event_information_by_id": get_event_information_by_id,
    "calendar_search_events": search_events,
    "calendar_create_event": create_event,
    "calendar_delete_event": delete_event,
    "calendar_update_event": update_event,
}
