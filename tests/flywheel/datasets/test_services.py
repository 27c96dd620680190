from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from flywheel.datasets.exports import snapshot_lines
from flywheel.datasets.models import RegressionTask, Split
from flywheel.datasets.services import (
    TaskOrigin,
    TaskRefused,
    snapshot_create,
    snapshot_mark_used,
    snapshot_subset_create,
    task_create,
    task_update,
)
from tests.flywheel.datasets.conftest import WORKBENCH, import_file, run_command
from trainer.contracts import ExpectedCall, Task

pytestmark = pytest.mark.django_db
PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
MANUAL = TaskOrigin(source_kind="manual")


def weather_task(task_id: str = "w1", prompt: str = "Weather in Paris?", **arguments) -> Task:
    call = ExpectedCall("get_weather", {"city": ["Paris"], **{k: [v] for k, v in arguments.items()}})
    return Task(id=task_id, messages=[{"role": "user", "content": prompt}], tools=[TOOL], expected_calls=[call])


def test_a_task_written_in_the_app_must_fit_its_schema():
    with pytest.raises(TaskRefused, match="days='three' does not fit its schema"):
        task_create(actor=None, task=weather_task(days="three"), split="train", agent=None, origin=MANUAL)
    missing = Task(id="m", messages=[{"role": "user", "content": "hi"}], tools=[TOOL],
                   expected_calls=[ExpectedCall("get_weather", {"days": [2]})])  # fmt: skip
    with pytest.raises(TaskRefused, match="required argument city is missing"):
        task_create(actor=None, task=missing, split="train", agent=None, origin=MANUAL)
    with pytest.raises(TaskRefused, match="no such tool"):
        task_create(actor=None, task=Task("x", [{"role": "user", "content": "hi"}], [TOOL], [ExpectedCall("nope", {})]),
                    split="train", agent=None, origin=MANUAL)  # fmt: skip


def test_a_task_without_a_user_message_is_refused():
    task = Task("s", [{"role": "system", "content": "be nice"}], [TOOL], [ExpectedCall("get_weather", {"city": ["X"]})])
    with pytest.raises(TaskRefused, match="no user message"):
        task_create(actor=None, task=task, split="train", agent=None, origin=MANUAL)


def test_a_prompt_cannot_sit_in_both_splits_even_reworded_in_case_and_spacing():
    task_create(actor=None, task=weather_task("a"), split="heldout", agent=None, origin=MANUAL)
    with pytest.raises(TaskRefused, match="leaks into Held-out: same prompt as task a"):
        task_create(actor=None, task=weather_task("b", "  weather in PARIS "), split="train", agent=None, origin=MANUAL)
    assert not RegressionTask.objects.filter(external_id="b").exists()


def test_an_edit_keeps_history_and_obeys_the_rules():
    task = task_create(actor=None, task=weather_task("a"), split="train", agent=None, origin=MANUAL)
    task_update(actor=None, task=task, new=weather_task("a", days=3), split="train", note="add days")
    task.refresh_from_db()
    assert task.revision == 2 and task.content["expected_calls"][0]["arguments"]["days"] == [3]
    assert list(task.revisions.values_list("number", flat=True)) == [2, 1]
    with pytest.raises(TaskRefused, match="does not fit"):
        task_update(actor=None, task=task, new=weather_task("a", days="x"), split="train")


def test_held_out_tasks_a_job_used_never_move_to_train():
    task = task_create(actor=None, task=weather_task("a"), split="heldout", agent=None, origin=MANUAL)
    snapshot = snapshot_create(actor=None, name="held", split=Split.HELDOUT)
    task_update(actor=None, task=task, new=weather_task("a"), split="heldout", note="still allowed")
    snapshot_mark_used(snapshot=snapshot)
    with pytest.raises(TaskRefused, match="stays held-out"):
        task_update(actor=None, task=task, new=weather_task("a"), split="train")


def test_snapshots_are_content_hashed_immutable_and_stratified():
    import_file(WORKBENCH / "email_queries_and_answers.csv", "workbench", "heldout")
    import_file(WORKBENCH / "calendar_queries_and_answers.csv", "workbench", "heldout")
    whole = snapshot_create(actor=None, name="all", split="heldout")
    assert whole.task_count == 200 and snapshot_create(actor=None, name="again", split="heldout") == whole
    sample = snapshot_create(actor=None, name="s", split="heldout", sample_size=20, stratify_by="category", seed=3)
    categories = list(sample.items.values_list("category", flat=True))
    assert len(categories) == 20 and categories.count("['email']") == 9 and categories.count("['calendar']") == 11
    again = snapshot_create(actor=None, name="s2", split="heldout", sample_size=20, stratify_by="category", seed=3)
    assert again == sample
    task = RegressionTask.objects.get(external_id="email_0")
    task_update(actor=None, task=task, new=Task.from_json({**task.content, "messages": task.content["messages"][:1] +
                [{"role": "user", "content": "changed"}]}), split="heldout")  # fmt: skip
    frozen = json.loads(next(line for line in snapshot_lines(whole, "native") if '"email_0"' in line))
    assert frozen["messages"][1]["content"] != "changed"


def test_a_subset_keeps_the_chosen_tasks_as_frozen_and_leaves_out_one_moved_to_held_out_since():
    for number, city in enumerate(("Paris", "Rome", "Oslo")):
        task_create(actor=None, task=weather_task(f"w{number}", f"Weather in {city}?"), split="train", agent=None,
                    origin=MANUAL)  # fmt: skip
    source = snapshot_create(actor=None, name="all", split="train")
    moved = RegressionTask.objects.get(external_id="w2")
    task_update(actor=None, task=moved, new=weather_task("w2", "Weather in Oslo?", days=2), split="heldout")
    subset = snapshot_subset_create(actor=None, source=source, task_ids=["w0", "w2"], name="mined", selection={})
    assert subset is not None and (subset.split, subset.task_count) == ("train", 1)
    assert [item.content["id"] for item in subset.items.all()] == ["w0"]
    assert subset.selection == {"from_snapshot": source.content_hash}
    again = snapshot_subset_create(actor=None, source=source, task_ids=["w0"], name="again", selection={})
    assert again == subset
    assert snapshot_subset_create(actor=None, source=source, task_ids=["w9"], name="none", selection={}) is None


def test_an_export_reimports_to_the_same_content_hashes(tmp_path):
    import_file(WORKBENCH / "email_queries_and_answers.csv", "workbench", "heldout")
    snapshot = snapshot_create(actor=None, name="all", split="heldout")
    out = StringIO()
    call_command("export_snapshot", snapshot.content_hash[:10], "--format", "native", stdout=out)
    exported = tmp_path / "snapshot.jsonl"
    exported.write_text(out.getvalue())
    hashes = set(RegressionTask.objects.values_list("content_hash", flat=True))
    call_command("import_tasks", str(exported), "--format", "native", "--split", "heldout", stdout=StringIO())
    reimported = RegressionTask.objects.filter(source_ref__startswith="snapshot.jsonl")
    assert reimported.count() == 90 and set(reimported.values_list("content_hash", flat=True)) == hashes
    assert all(Task.from_json(json.loads(line)) for line in out.getvalue().splitlines())


def test_the_trl_and_nemo_gym_exports_carry_what_the_reward_needs():
    import_file(WORKBENCH / "email_queries_and_answers.csv", "workbench", "train")
    snapshot = snapshot_create(actor=None, name="all", split="train")
    trl = json.loads(next(snapshot_lines(snapshot, "trl")))
    assert trl["prompt"][-1]["role"] == "user" and trl["expected_calls"] and trl["task_id"] == "email_0"
    nemo = json.loads(next(snapshot_lines(snapshot, "nemo-gym")))
    assert nemo["responses_create_params"]["tools"][0]["type"] == "function"
    assert json.loads(nemo["ground_truth"][0]["arguments"]) == {
        k: v[0] for k, v in trl["expected_calls"][0]["arguments"].items()
    }


def test_snapshot_command_prints_its_hash():
    import_file(WORKBENCH / "email_queries_and_answers.csv", "workbench", "heldout")
    printed = run_command("snapshot_tasks", "--split", "heldout", "--name", "held", "--sample", "10")
    assert printed["tasks"] == 10 and len(printed["hash"]) == 64
