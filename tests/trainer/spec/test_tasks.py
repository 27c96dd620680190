"""Task files (`trainer.spec.tasks`): loading with errors that name the line, hashing, the seeded samplers."""

from __future__ import annotations

import json

import pytest

from trainer.contracts import DoneEvent, Task
from trainer.spec.config import SpecError
from trainer.spec.tasks import (
    SkippedLine,
    load_tasks,
    read_task_files,
    seeded_sample,
    skipped_warning,
    snapshot_sha256,
    stratified_sample,
    with_skipped,
    write_tasks,
)


def task(number: int) -> Task:
    return Task.from_json({"id": f"t{number}", "messages": [{"role": "user", "content": f"request {number}"}],
                           "tools": [], "expected_calls": [{"name": "f", "arguments": {}}]})


def test_written_tasks_load_back_and_hash_by_their_bytes(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, [task(1), task(2)])
    assert [loaded.id for loaded in load_tasks([str(path)])] == ["t1", "t2"]
    before = snapshot_sha256([str(path)])
    write_tasks(path, [task(2), task(1)])
    assert snapshot_sha256([str(path)]) != before


def test_a_bad_line_is_a_spec_error_naming_file_and_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(task(1).to_json_line() + "\n{not json\n")
    with pytest.raises(SpecError, match=r"tasks.jsonl:2: invalid JSON"):
        load_tasks([str(path)])


# What `tasks from-bfcl` wrote for live_simple_106-63-0 before it learnt to convert an empty answer list.
EMPTY_ALTERNATIVES = json.dumps({"id": "live_simple_106-63-0", "messages": [], "tools": [],
                                 "expected_calls": [{"name": "record", "arguments": {"bank_hours_start": []}}]})


def test_lenient_reading_skips_bad_lines_and_names_their_file_line_and_reason(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join([task(1).to_json_line(), EMPTY_ALTERNATIVES, "", "{not json", "[1]",
                               task(2).to_json_line()]) + "\n")
    loaded = read_task_files([str(path)], strict=False)
    assert [kept.id for kept in loaded.tasks] == ["t1", "t2"]
    assert [(line.file, line.line) for line in loaded.skipped] == [("tasks.jsonl", 2), ("tasks.jsonl", 4),
                                                                   ("tasks.jsonl", 5)]
    assert "argument 'bank_hours_start' must be a non-empty list" in loaded.skipped[0].reason
    assert loaded.skipped[1].reason.startswith("invalid JSON")
    assert loaded.skipped[2].reason == "a task must be a JSON object, got list"


def test_strict_reading_refuses_the_file_at_its_first_bad_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(task(1).to_json_line() + "\n" + EMPTY_ALTERNATIVES + "\n{not json\n")
    with pytest.raises(SpecError, match=r"tasks.jsonl:2: expected call record: argument 'bank_hours_start'"):
        read_task_files([str(path)], strict=True)


def test_a_file_without_one_usable_task_is_refused_even_when_lenient(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(EMPTY_ALTERNATIVES + "\n{not json\n")
    with pytest.raises(SpecError, match=r"no usable task in .*tasks.jsonl \(2 bad line\(s\) skipped: tasks.jsonl:1: "):
        read_task_files([str(path)], strict=False)
    with pytest.raises(SpecError, match="task file not found"):
        read_task_files([str(tmp_path / "absent.jsonl"), str(path)], strict=False)


def test_skipped_lines_become_a_warning_and_the_done_events_skipped_tasks():
    skipped = [SkippedLine("tasks.jsonl", number, f"reason {number}") for number in range(1, 8)]
    warning = skipped_warning(skipped)
    assert warning is not None and warning.level == "warning"
    assert warning.message.startswith("skipped 7 bad task line(s)")
    assert "tasks.jsonl:1: reason 1" in warning.message and "and 2 more" in warning.message
    done = with_skipped(DoneEvent(metrics={"tasks": 3}), skipped)
    assert done.metrics["tasks"] == 3 and done.metrics["skipped_tasks"]["count"] == 7
    assert done.metrics["skipped_tasks"]["first"][0] == {"file": "tasks.jsonl", "line": 1, "reason": "reason 1"}
    assert len(done.metrics["skipped_tasks"]["first"]) == 5
    assert skipped_warning([]) is None and with_skipped(DoneEvent(metrics={}), []).metrics == {}


def test_the_stratified_sample_keeps_each_strata_share_and_the_input_order():
    items = [("a", number) for number in range(30)] + [("b", number) for number in range(10)]
    sample = stratified_sample(items, 8, 3, lambda item: item[0])
    assert sum(1 for name, _ in sample if name == "a") == 6 and sum(1 for name, _ in sample if name == "b") == 2
    assert sample == sorted(sample, key=items.index)
    assert stratified_sample(items, 8, 3, lambda item: item[0]) == sample
    assert stratified_sample(items, 8, 4, lambda item: item[0]) != sample


def test_the_largest_remainders_get_the_seats_left_over():
    items = ["a"] * 5 + ["b"] * 3 + ["c"] * 2
    sample = stratified_sample(items, 5, 0, lambda item: item)
    # quotas 2.5, 1.5, 1.0: the floors give 2+1+1, one seat left goes to the larger remainder, a's (tie broken by name)
    assert sorted(sample) == ["a", "a", "a", "b", "c"]


def test_the_seeded_sample_is_all_items_when_the_size_is_none_or_too_big():
    items = list(range(10))
    assert seeded_sample(items, None, 0) == items and seeded_sample(items, 99, 0) == items
    assert seeded_sample(items, 4, 0) == sorted(seeded_sample(items, 4, 0)) and len(seeded_sample(items, 4, 0)) == 4
