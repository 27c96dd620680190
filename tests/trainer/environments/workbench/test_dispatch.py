"""Dispatching a call: the tool and arguments are checked against the task's schemas, refusals are observations."""

from __future__ import annotations

import pytest

from trainer.contracts import ToolCall
from trainer.environments.workbench.dispatch import run_tool, tool_name


@pytest.fixture
def schemas(make_task):
    return make_task().tool_schemas


def test_an_offered_tool_runs_and_its_result_is_the_observation(state, schemas):
    outcome = run_tool(state, schemas, ToolCall("company_directory_find_email_address", {"name": "nadia"}))
    assert outcome.ok and outcome.observation == ["nadia.moreau@atlas.com"]


def test_workbenchs_dotted_names_are_read_as_the_underscored_tools(state, schemas):
    assert tool_name("calendar.delete_event") == "calendar_delete_event"
    assert run_tool(state, schemas, ToolCall("calendar.delete_event", {"event_id": "00000256"})).ok


def test_an_unknown_tool_is_refused_with_the_closest_offered_name(state, schemas):
    outcome = run_tool(state, schemas, ToolCall("calendar_delete_events", {"event_id": "00000256"}))
    assert not outcome.ok
    assert outcome.observation == "Error: unknown tool 'calendar_delete_events'. Did you mean 'calendar_delete_event'?"


def test_a_tool_the_task_does_not_offer_is_unknown_even_if_the_sandbox_has_it(state):
    offered = {"calendar_delete_event": {"type": "object", "properties": {"event_id": {"type": "string"}}}}
    outcome = run_tool(state, offered, ToolCall("email_delete_email", {"email_id": "00000259"}))
    assert not outcome.ok and state.emails.get("00000259") is not None


def test_an_offered_tool_the_sandbox_lacks_is_refused(state):
    outcome = run_tool(state, {"payments_refund": {"type": "object"}}, ToolCall("payments_refund", {}))
    assert not outcome.ok and "no such tool" in outcome.observation


def test_an_unexpected_argument_is_refused_and_names_the_accepted_ones(state, schemas):
    outcome = run_tool(state, schemas, ToolCall("calendar_delete_event", {"id": "00000256"}))
    assert not outcome.ok
    assert (
        outcome.observation
        == "Error executing tool 'calendar_delete_event': unexpected argument 'id'; accepted: event_id"
    )


def test_null_arguments_are_dropped_and_numbers_become_text_where_text_is_expected(state, schemas):
    arguments = {
        "event_name": "Sync",
        "participant_email": "nia.johnson@atlas.com",
        "event_start": "2023-12-01 10:00:00",
        "duration": 30,
        "location": None,
    }
    outcome = run_tool(state, schemas, ToolCall("calendar_create_event", arguments))
    assert outcome.ok and state.calendar.get(outcome.observation)["duration"] == "30"


def test_digits_given_for_an_integer_become_the_integer(state, schemas):
    outcome = run_tool(state, schemas, ToolCall("email_search_emails", {"query": "kofi", "page_size": "2"}))
    assert outcome.ok and outcome.observation["pagination"]["page_size"] == 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (ToolCall("calendar_delete_event", {"event_id": ["00000256"]}), "argument 'event_id' must be string"),
        (ToolCall("email_search_emails", {"page": "first"}), "argument 'page' must be integer"),
        (ToolCall("email_search_emails", {"page_size": 0}), "page_size must be a positive number."),
        (ToolCall("calendar_delete_event", {"event_id": "00009999"}), "Event not found."),
    ],
)
def test_bad_values_come_back_as_observations_not_exceptions(state, schemas, call, message):
    outcome = run_tool(state, schemas, call)
    assert not outcome.ok and message in outcome.observation
