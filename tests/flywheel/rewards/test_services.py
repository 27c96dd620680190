from __future__ import annotations

import json

import pytest

from flywheel.core.models import AuditEvent
from flywheel.core.roles import Role
from flywheel.rewards.models import Mark, OutputSource, ProfiledOutput
from flywheel.rewards.services import (
    ProfileRefused,
    Scoring,
    mark_set,
    output_sha256,
    profile_create,
    reverify,
)
from tests.flywheel.rewards.conftest import (
    BFCL_MANY,
    KINDS,
    STRICT_POLICY,
    default_scoring,
    outputs_lines,
    strict_scoring,
)
from trainer.verifiers import get_verifier
from trainer.verifiers.batch import Summary, read_tasks, verify_lines

pytestmark = pytest.mark.django_db


def profile(snapshot, *, size: int = 100, seed: int = 0, lines=None, scoring=None, actor=None):
    return profile_create(
        actor=actor, snapshot=snapshot, scoring=scoring or default_scoring(), source_kind=OutputSource.UPLOAD,
        sample_size=size, seed=seed, lines=outputs_lines(snapshot) if lines is None else lines,
        source_name="bfcl-outputs.jsonl",
    )  # fmt: skip


def kind_of(output: ProfiledOutput) -> str:
    return KINDS[output.item.position % len(KINDS)]


def calls_a_calculator(output: ProfiledOutput) -> bool:
    return kind_of(output) != "broken" and json.loads(output.output)["name"].startswith("calculate_")


def test_a_run_draws_the_asked_sample_with_its_seed_and_the_same_seed_draws_the_same(bfcl_many):
    run = profile(bfcl_many, size=100, seed=7)
    refs = list(run.outputs.values_list("task_ref", flat=True))
    assert len(refs) == 100 == len(set(refs)) and run.source_stats["matched"] == BFCL_MANY
    assert refs == list(profile(bfcl_many, size=100, seed=7).outputs.values_list("task_ref", flat=True))
    assert refs != list(profile(bfcl_many, size=100, seed=8).outputs.values_list("task_ref", flat=True))
    # Kept in file order, so the sample reads like the source.
    positions = list(run.outputs.order_by("position").values_list("item__position", flat=True))
    assert positions == sorted(positions)


def test_scores_are_what_the_verify_cli_gives_for_the_same_lines(bfcl, tmp_path):
    run = profile(bfcl, size=30, seed=1)
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(f"{json.dumps(item.content)}\n" for item in bfcl.items.all()))
    cli = {
        row["id"]: row
        for row in verify_lines(get_verifier("tool_call"), read_tasks(tasks_file), outputs_lines(bfcl), Summary("t"))
    }
    for output in run.outputs.all():
        assert output.verdict == cli[output.task_ref]
        assert output.reward == pytest.approx(cli[output.task_ref]["reward"])
    by_kind = {kind: {round(o.reward, 6) for o in run.outputs.all() if kind_of(o) == kind} for kind in KINDS}
    # tool_call keeps the arguments part when the tool is wrong: the kind of score a profile lets people question.
    assert by_kind["broken"] == {-1.0} and by_kind["wrong_tool"] == {0.6}
    assert 1.0 in by_kind["right"] and max(by_kind["wrong_argument"]) < 1.0


def test_reverify_under_a_stricter_policy_changes_scores_and_leaves_the_outputs_untouched(bfcl, make_user):
    trainer = make_user(Role.TRAINER)
    parent = profile(bfcl, size=40, seed=3, actor=trainer)
    before = list(parent.outputs.order_by("position").values_list("id", "output", "output_sha256", "reward"))

    child = reverify(actor=trainer, run=parent, scoring=strict_scoring(), note="deny calculators")

    assert list(parent.outputs.order_by("position").values_list("id", "output", "output_sha256", "reward")) == before
    pairs = list(zip(parent.outputs.order_by("position"), child.outputs.order_by("position"), strict=True))
    assert len(pairs) == 40 and child.parent == parent and child.root_id == parent.pk
    for old, new in pairs:
        assert (new.output, new.output_sha256, new.origin_id, new.item_id) == (old.output, old.output_sha256, old.id,
                                                                               old.item_id)  # fmt: skip
        assert new.output_sha256 == output_sha256(new.output)
    changed = 0
    for old, new in pairs:
        if calls_a_calculator(old):
            assert "denied-tool" in new.verdict["violations"] and new.components["safety"] == 0.0
            assert new.reward == pytest.approx(old.reward - 0.2) and not new.passed
            changed += 1
        else:
            assert (new.reward, new.verdict) == (old.reward, old.verdict)
    assert changed >= 5, "BFCL simple_python has many calculate_* tools"
    assert AuditEvent.objects.filter(action="reward_profile.reverify", target_id=str(child.pk)).exists()


def test_a_reverify_of_a_reverify_still_points_at_the_first_outputs(bfcl):
    root = profile(bfcl, size=20)
    child = reverify(actor=None, run=root, scoring=strict_scoring())
    grandchild = reverify(actor=None, run=child, scoring=Scoring("binary", STRICT_POLICY))
    assert grandchild.root_id == root.pk and grandchild.parent_id == child.pk
    root_ids = set(root.outputs.values_list("id", flat=True))
    assert set(grandchild.outputs.values_list("origin_id", flat=True)) == root_ids
    assert set(grandchild.outputs.values_list("reward", flat=True)) <= {0.0, 1.0}


def test_unknown_ids_and_unreadable_lines_are_counted_and_skipped(bfcl):
    lines = [*outputs_lines(bfcl)[:5], "", "not json", '{"id": "no_such_task", "output": "x"}', '{"output": "x"}']
    run = profile(bfcl, size=50, lines=lines)
    stats = run.source_stats
    assert (stats["read"], stats["matched"], stats["unknown_ids"], stats["invalid"]) == (8, 5, 1, 2)
    assert run.outputs.count() == 5
    # The file's own line numbers, blank lines counted.
    assert "line 8: no task no_such_task in the snapshot" in stats["errors"]
    assert any(error.startswith("line 7: invalid JSON") for error in stats["errors"])


def test_nothing_to_score_a_bad_policy_or_an_unknown_verifier_is_refused(bfcl):
    with pytest.raises(ProfileRefused, match="no output answers a task"):
        profile(bfcl, lines=['{"id": "elsewhere", "output": "x"}'])
    bad_pattern = {"name": "bad", "argument_patterns": [{"id": "p", "pattern": "("}]}
    with pytest.raises(ProfileRefused, match="safety policy"):
        profile(bfcl, scoring=Scoring("tool_call", bad_pattern))
    with pytest.raises(ProfileRefused, match="unknown verifier"):
        profile(bfcl, scoring=Scoring("no_such_verifier", STRICT_POLICY))
    with pytest.raises(ProfileRefused, match="between 1 and 500"):
        profile(bfcl, size=0)
    assert not ProfiledOutput.objects.exists()


def test_a_reviewer_has_one_mark_per_output_and_can_change_it(bfcl, make_user):
    run = profile(bfcl, size=10)
    output = run.outputs.first()
    first, second = make_user(Role.TRAINER), make_user(Role.TRAINER)
    mark_set(actor=first, output=output, verdict="agree")
    mark_set(actor=first, output=output, verdict="disagree", note="  the argument is a synonym  ")
    mark_set(actor=second, output=output, verdict="agree")
    marks = {mark.reviewer_id: mark for mark in Mark.objects.filter(output=output)}
    assert len(marks) == 2 and marks[first.pk].verdict == "disagree"
    assert marks[first.pk].note == "the argument is a synonym"
    assert AuditEvent.objects.filter(action="reward_mark.set").count() == 3
    with pytest.raises(ProfileRefused, match="agree or disagree"):
        mark_set(actor=first, output=output, verdict="maybe")
