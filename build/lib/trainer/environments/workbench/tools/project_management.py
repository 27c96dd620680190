"""The project management tools: look up, search, create, delete and update tasks.

Behaviour follows NeMo Gym's workplace assistant: a search needs at least one filter, matches
the assignee's address exactly (case-insensitive) and the other filters as substrings, and
returns every match (no paging; an empty list when none). A new or reassigned task must go
to someone who already has tasks, on one of the known lists and boards (their case matters).
"""

from __future__ import annotations

import re
from typing import Any

from trainer.environments.workbench.data import Row
from trainer.environments.workbench.state import WorkbenchState
from trainer.environments.workbench.tools.common import Tool, ToolError, contains, one_of

LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
UPDATABLE_FIELDS = ("task_name", "assigned_to_email", "list_name", "due_date", "board")
_EMAIL = re.compile(r"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}$")


def get_task_information_by_id(state: WorkbenchState, task_id: str | None = None, field: str | None = None) -> Any:
    if not task_id:
        raise ToolError("Task ID not provided.")
    if not field:
        raise ToolError("Field not provided.")
    task = _task(state, task_id)
    if field not in task:
        raise ToolError("Field not found.")
    return {field: task[field]}


def search_tasks(
    state: WorkbenchState,
    task_name: str | None = None,
    assigned_to_email: str | None = None,
    list_name: str | None = None,
    due_date: str | None = None,
    board: str | None = None,
) -> Any:
    filters = {"task_name": task_name, "list_name": list_name, "due_date": due_date, "board": board}
    if not assigned_to_email and not any(filters.values()):
        raise ToolError("No search parameters provided.")
    if assigned_to_email and not _EMAIL.match(assigned_to_email):
        raise ToolError("Invalid email format for assigned_to_email.")
    return [
        dict(task)
        for task in state.project_tasks.values()
        if (not assigned_to_email or (task["assigned_to_email"] or "").lower() == assigned_to_email.lower())
        and all(contains(task[column], value) for column, value in filters.items() if value)
    ]


def create_task(
    state: WorkbenchState,
    task_name: str | None = None,
    assigned_to_email: str | None = None,
    list_name: str | None = None,
    due_date: str | None = None,
    board: str | None = None,
) -> Any:
    if not task_name or not assigned_to_email or not list_name or not due_date or not board:
        raise ToolError("Missing task details.")
    assignee = assigned_to_email.lower()
    _check_assignee(state, assignee)
    one_of(list_name, LISTS, "List not valid.")
    one_of(board, BOARDS, "Board not valid.")
    return state.project_tasks.insert(
        {
            "task_name": task_name,
            "assigned_to_email": assignee,
            "list_name": list_name,
            "due_date": due_date,
            "board": board,
        }
    )


def delete_task(state: WorkbenchState, task_id: str | None = None) -> Any:
    if not task_id:
        raise ToolError("Task ID not provided.")
    _task(state, task_id)
    state.project_tasks.delete(task_id)
    return "Task deleted successfully."


def update_task(
    state: WorkbenchState, task_id: str | None = None, field: str | None = None, new_value: str | None = None
) -> Any:
    if not task_id or not field or not new_value:
        raise ToolError("Task ID, field, or new value not provided.")
    if field not in UPDATABLE_FIELDS:
        raise ToolError(f"Field not valid. Available fields are: {', '.join(UPDATABLE_FIELDS)}")
    value = new_value.lower() if field == "assigned_to_email" else new_value
    if field == "board":
        one_of(value, BOARDS, "Board not valid.")
    if field == "list_name":
        one_of(value, LISTS, "List not valid.")
    if field == "assigned_to_email":
        _check_assignee(state, value)
    _task(state, task_id)
    state.project_tasks.update(task_id, field, value)
    return "Task updated successfully."


def _check_assignee(state: WorkbenchState, address: str) -> None:
    team = {(task["assigned_to_email"] or "").lower() for task in state.project_tasks.values()}
    if address not in team:
        raise ToolError("Assignee email not valid. Please choose from the list of team members.")


def _task(state: WorkbenchState, task_id: str) -> Row:
    task = state.project_tasks.get(task_id)
    if task is None:
        raise ToolError("Task not found.")
    return task


TOOLS: dict[str, Tool] = {
    "project_management_get_task_information_by_id": get_task_information_by_id,
    "project_management_search_tasks": search_tasks,
    "project_management_create_task": create_task,
    "project_management_delete_task": delete_task,
    "project_management_update_task": update_task,
}
