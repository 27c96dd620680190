"""Task files (`trainer.spec.tasks`): loading with errors that name the line, hashing, the seeded samplers."""

from __future__ import annotations

import pytest

from trainer.contracts import Task
from trainer.spec.config import SpecError
from trainer.spec.tasks import load_tasks, seeded_sample, snapshot_sha256, stratified_sample, write_tasks


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
