"""Loading WorkBench's tables: where from, what they hold, and a clear error when they are missing."""

from __future__ import annotations

import shutil

import pytest

from tests.trainer.environments.conftest import WORKBENCH
from trainer.environments.workbench import ENV_VAR, WorkbenchDataMissing, load_data
from trainer.environments.workbench.data import DEFAULT_DATA_DIR, resolve_data_dir


def test_the_tables_hold_workbenchs_starting_rows(workbench_data):
    sizes = {name: len(table.rows) for name, table in workbench_data.tables.items()}
    assert sizes == {
        "calendar_events": 300,
        "emails": 500,
        "project_tasks": 300,
        "customer_relationship_manager_data": 200,
    }
    assert len(workbench_data.visits) == 1000 and len(workbench_data.directory) == 20


def test_an_empty_cell_reads_as_none_and_engagement_as_a_boolean(workbench_data):
    assert workbench_data.tables["customer_relationship_manager_data"].rows["00000014"]["customer_phone"] is None
    assert {visit["user_engaged"] for visit in workbench_data.visits} == {True, False}


def test_rows_are_read_only(workbench_data):
    with pytest.raises(TypeError):
        workbench_data.tables["calendar_events"].rows["00000013"]["event_name"] = "changed"  # type: ignore[index]


def test_the_folder_is_read_once(workbench_data):
    assert load_data(WORKBENCH) is workbench_data


def test_the_argument_wins_over_the_environment_variable_which_wins_over_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert resolve_data_dir() == DEFAULT_DATA_DIR.resolve()
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert resolve_data_dir() == tmp_path.resolve()
    assert resolve_data_dir(WORKBENCH) == WORKBENCH.resolve()


def test_a_missing_folder_names_itself_and_the_environment_variable(tmp_path):
    with pytest.raises(WorkbenchDataMissing, match=f"{tmp_path / 'nowhere'} not found.*{ENV_VAR}"):
        load_data(tmp_path / "nowhere")


def test_a_missing_file_is_named(tmp_path):
    copy = tmp_path / "workbench"
    shutil.copytree(WORKBENCH / "processed", copy / "processed", ignore=shutil.ignore_patterns("queries_and_answers"))
    with pytest.raises(WorkbenchDataMissing, match="email_addresses.csv not found"):
        load_data(copy)
