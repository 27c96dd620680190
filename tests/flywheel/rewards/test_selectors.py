from __future__ import annotations

import pytest

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.rewards import selectors
from flywheel.rewards.models import OutputSource
from flywheel.rewards.services import mark_set, profile_create, reverify
from flywheel.triage.models import AgentPolicy
from tests.flywheel.rewards.conftest import default_scoring, outputs_lines, strict_scoring

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(bfcl):
    return profile_create(
        actor=None, snapshot=bfcl, scoring=default_scoring(), source_kind=OutputSource.UPLOAD, sample_size=40,
        lines=outputs_lines(bfcl),
    )  # fmt: skip


def test_the_summary_counts_passes_unparseable_and_unsafe_outputs(run):
    summary = selectors.run_summary(run=run)
    assert summary.outputs == 40 and summary.unparseable == 10  # every fourth output is broken JSON
    assert summary.unsafe == 0 and 0 < summary.passed < 20
    profile = selectors.run_profile(run=run)
    assert profile.summary == summary and summary.mean_reward == pytest.approx(sum(profile.rewards) / 40)
    assert profile.rewards == list(run.outputs.order_by("position").values_list("reward", flat=True))


def test_components_are_summarised_per_name_with_their_range(run):
    stats = {stat.name: stat for stat in selectors.run_profile(run=run).components}
    assert set(stats) == {"parse", "tool", "arguments", "safety"}
    assert (stats["parse"].minimum, stats["parse"].maximum) == (-1.0, 0.0)
    assert stats["parse"].mean == pytest.approx(-0.25) and stats["tool"].maximum == pytest.approx(0.4)
    assert all(stat.count == 40 for stat in stats.values())


def test_agreement_counts_marks_of_every_reviewer(run, make_user):
    first, second = make_user(Role.TRAINER), make_user(Role.ADMIN)
    outputs = list(run.outputs.order_by("position"))
    assert selectors.agreement(run=run).rate is None
    mark_set(actor=first, output=outputs[0], verdict="agree")
    mark_set(actor=second, output=outputs[0], verdict="disagree")
    mark_set(actor=first, output=outputs[1], verdict="agree")
    mark_set(actor=first, output=outputs[2], verdict="agree")
    result = selectors.agreement(run=run)
    assert (result.outputs, result.marked_outputs, result.agree, result.disagree) == (40, 3, 3, 1)
    assert result.rate == pytest.approx(0.75)


def test_outputs_come_disagreed_first_then_unmarked_then_agreed(run, make_user):
    reviewer = make_user(Role.TRAINER)
    outputs = list(run.outputs.order_by("position"))
    mark_set(actor=reviewer, output=outputs[0], verdict="agree")
    mark_set(actor=reviewer, output=outputs[7], verdict="disagree", note="too generous")
    rows = selectors.output_rows(run=run, user=reviewer)
    order = [row.output.pk for row in rows]
    assert order[0] == outputs[7].pk and order[-1] == outputs[0].pk
    assert order[1:-1] == [o.pk for o in outputs if o.pk not in (outputs[0].pk, outputs[7].pk)]
    assert rows[0].mine.note == "too generous" and rows[1].mine is None
    assert (rows[0].output.disagree_count, rows[-1].output.agree_count) == (1, 1)
    assert selectors.output_rows(run=run, user=make_user(Role.VIEWER))[0].mine is None


def test_a_comparison_lists_changed_scores_first_with_the_broken_rules_and_the_old_marks(run, make_user):
    reviewer = make_user(Role.TRAINER)
    right = next(o for o in run.outputs.order_by("position") if o.passed and "calculate_" in o.output)
    mark_set(actor=reviewer, output=right, verdict="agree")
    child = reverify(actor=None, run=run, scoring=strict_scoring())
    comparison = selectors.run_comparison(base=run, other=child)
    assert len(comparison.rows) == 40 and comparison.same_outputs
    changed = comparison.changed
    assert changed and comparison.rows[: len(changed)] == changed  # changed rows lead
    assert comparison.lowered == len(changed) and comparison.raised == 0
    row = next(row for row in changed if row.base.pk == right.pk)
    assert row.delta == pytest.approx(-0.2) and row.violations_added == ["denied-tool"]
    assert row.component_changes == [("safety", pytest.approx(0.2), 0.0)]
    assert [mark.verdict for mark in row.base_marks] == ["agree"]
    assert row.base.verdict["reason"] != row.other.verdict["reason"]


def test_runs_of_different_samples_are_not_comparable(run, bfcl):
    other = profile_create(
        actor=None, snapshot=bfcl, scoring=default_scoring(), source_kind=OutputSource.UPLOAD, sample_size=10,
        lines=outputs_lines(bfcl),
    )  # fmt: skip
    with pytest.raises(selectors.NotComparable):
        selectors.run_comparison(base=run, other=other)
    family = list(selectors.run_family(run=reverify(actor=None, run=run, scoring=strict_scoring())))
    assert family[0] == run and len(family) == 2


def test_the_default_policy_is_the_agent_policy_where_there_is_one():
    agent = Agent.objects.create(name="shop")
    assert selectors.default_policy(agent_id=agent.pk)["name"] == "default"
    AgentPolicy.objects.create(agent=agent, policy={"name": "shop-policy", "denied_tools": ["refund_*"]})
    assert selectors.default_policy(agent_id=agent.pk)["name"] == "shop-policy"
    assert selectors.default_policy(agent_id=None)["name"] == "default"
