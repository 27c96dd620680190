"""The project management tools, on WorkBench's tasks."""

from __future__ import annotations

import pytest

from trainer.environments.workbench.tools import ToolError
from trainer.environments.workbench.tools.project_management import (
    create_task,
    delete_task,
    get_task_information_by_id,
    search_tasks,
    update_task,
)


def test_a_lookup_returns_the_field_asked_for(state):
    assert get_task_information_by_id(state, "00000149", "board") == {"board": "Front end"}
    with pytest.raises(ToolError, match="Task not found."):
        get_task_information_by_id(state, "00009999", "board")


def test_a_search_matches_the_assignee_exactly_and_other_filters_as_substrings(state):
    found = search_tasks(state, assigned_to_email="LEILA.AZIZI@atlas.com", board="front")
    assert found and all(t["assigned_to_email"] == "leila.azizi@atlas.com" and t["board"] == "Front end" for t in found)
    assert search_tasks(state, assigned_to_email="leila@atlas.com") == []


@pytest.mark.parametrize(
    ("arguments", "message"), [({}, "No search parameters"), ({"assigned_to_email": "leila"}, "Invalid email")]
)
def test_a_search_without_filters_or_with_a_bad_address_is_refused(state, arguments, message):
    with pytest.raises(ToolError, match=message):
        search_tasks(state, **arguments)


def test_creating_a_task_gives_the_next_id(state):
    task_id = create_task(state, "Write docs", "Leila.Azizi@atlas.com", "Backlog", "2023-12-08", "Design")
    assert task_id == "00000300"
    assert state.project_tasks.get(task_id)["assigned_to_email"] == "leila.azizi@atlas.com"


@pytest.mark.parametrize(
    ("assignee", "list_name", "board", "message"),
    [
        ("stranger@atlas.com", "Backlog", "Design", "Assignee email not valid"),
        ("leila.azizi@atlas.com", "backlog", "Design", "List not valid"),
        ("leila.azizi@atlas.com", "Backlog", "Ops", "Board not valid"),
    ],
)
def test_a_task_for_a_stranger_or_an_unknown_list_or_board_is_not_created(state, assignee, list_name, board, message):
    with pytest.raises(ToolError, match=message):
        create_task(state, "Write docs", assignee, list_name, "2023-12-08", board)
    assert state.project_tasks.get("00000300") is None


def test_updating_and_deleting_a_task(state):
    assert update_task(state, "00000149", "list_name", "In Review") == "Task updated successfully."
    assert state.project_tasks.get("00000149")["list_name"] == "In Review"
    with pytest.raises(ToolError, match="Field not valid"):
        update_task(state, "00000149", "task_id", "00000001")
    assert delete_task(state, "00000149") == "Task deleted successfully."
    with pytest.raises(ToolError, match="Task not found."):
        delete_task(state, "00000149")
