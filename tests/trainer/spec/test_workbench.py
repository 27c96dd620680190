from __future__ import annotations

import re

import pytest

from tests.trainer.tiny_model import EXTERNAL
from trainer.spec.workbench import SYSTEM_TEXT, answer_calls, single_call_tasks, value_available

ADDRESSES = ["raj.patel@atlas.com", "nia.johnson@atlas.com"]


def test_a_value_in_the_request_is_available_with_spacing_and_case_ignored():
    assert value_available("Front end", "Add it to the front-end board", ADDRESSES)
    assert value_available("total_visits", "plot total visits", ADDRESSES)
    assert not value_available("00000256", "Delete my first meeting on December 13", ADDRESSES)


def test_a_directory_address_is_available_only_when_the_request_names_its_person():
    assert value_available("raj.patel@atlas.com", "assign them to Raj", ADDRESSES)
    assert not value_available("raj.patel@atlas.com", "assign them to the person with the fewest tasks", ADDRESSES)


def test_dates_times_and_durations_named_in_the_request_are_available():
    request = "Create a 1.5 hour event on December 8 at 3:30 with nia"
    assert value_available("2023-12-08 15:30:00", request, ADDRESSES)
    assert value_available("90", request, ADDRESSES)
    assert not value_available("2023-12-08 03:30:00", request, ADDRESSES)
    assert not value_available("2023-12-01", "due on December 13", ADDRESSES)
    assert not value_available("2024-12-08", "due on December 8", ADDRESSES)


def test_workbench_answers_become_calls_with_underscore_names():
    calls = answer_calls("['calendar.delete_event.func(event_id=\"00000256\")']")
    assert [(call.name, call.arguments) for call in calls] == [("calendar_delete_event", {"event_id": "00000256"})]


@pytest.mark.skipif(not (EXTERNAL / "workbench").is_dir(), reason="needs ../shared/external/workbench")
def test_the_selected_tasks_need_one_call_no_lookup_and_offer_only_their_domains_tools():
    tasks = list(single_call_tasks(EXTERNAL))
    assert len(tasks) >= 30
    for task in tasks:
        request = task.messages[-1]["content"]
        domain = task.metadata.source.split(":")[1]
        assert not re.search(r"\bif\b", request, re.IGNORECASE)
        assert len(task.expected_calls) == 1
        offered = [tool["function"]["name"] for tool in task.tools]
        assert task.expected_calls[0].name in offered
        assert all(name.startswith(domain + "_") for name in offered)
        assert task.messages[0]["content"].startswith(SYSTEM_TEXT)
