"""The evaluation page's recommendation: what the agent has feeds it, and each option's button is pre-filled."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from django.urls import reverse
from django.utils import timezone

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.datasets.importers import read
from flywheel.datasets.models import PairSource
from flywheel.datasets.services import PairDraft, pair_create, pair_snapshot_create, snapshot_create, tasks_import
from flywheel.ingest.models import Trajectory
from flywheel.training import selectors
from flywheel.training.models import EvalRun
from flywheel.triage.models import Bucket, BucketAssignment
from tests.flywheel.registry.conftest import TINY_TASKS
from tests.flywheel.training.test_views import RATES, make_job, rate
from tests.flywheel.triage.conftest import built_in_buckets  # noqa: F401  (a shared fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("built_in_buckets")]
SOMETIMES_RIGHT = {**RATES, "valid_json_rate": rate(0.95, 0.8, 1.0)}  # valid calls: no prompt for the format


@pytest.fixture
def agent():
    return Agent.objects.create(name="shop")


@pytest.fixture
def baseline(agent) -> EvalRun:
    """A baseline evaluation of the demo model on the agent's held-out tasks: valid calls, sometimes right."""
    tasks_import(actor=None, candidates=read(TINY_TASKS, "native"), split="heldout", agent=agent, source_ref="tiny")
    heldout = snapshot_create(actor=None, name="shop held-out", split="heldout", agent=agent)
    job = make_job(heldout, kind="eval", state="succeeded", agent=agent)
    return EvalRun.objects.create(job=job, snapshot=heldout, model_label="demo", metrics=SOMETIMES_RIGHT)


def add_pairs(agent: Agent, count: int, reviewer) -> None:
    for number in range(count):
        prompt = [{"role": "user", "content": f"Refund order {number}."}]
        draft = PairDraft(agent=agent, prompt=prompt, tools=[], chosen=[{"role": "assistant", "content": "Looked up."}],
                          rejected=[{"role": "assistant", "content": "Refunded."}], source=PairSource.CORRECTION,
                          trajectory=None, step_index=0)  # fmt: skip
        pair_create(actor=reviewer, draft=draft, split="train")


def review(agent: Agent, *slugs: str) -> None:
    for number, slug in enumerate(slugs):
        trajectory = Trajectory.objects.create(agent=agent, source=agent.name, external_id=f"t-{number}",
                                               content_hash=f"{number:064d}", outcome="failure",
                                               ingested_at=timezone.now())  # fmt: skip
        BucketAssignment.objects.create(trajectory=trajectory, bucket=Bucket.objects.get(slug=slug))


def options(page: str) -> list[str]:
    return re.findall(r'<li data-option="(\w+)">', page)


def launch(page: str, method: str) -> dict[str, list[str]] | None:
    found = re.search(rf'href="([^"]+)" data-launch="{method}"', page)
    return parse_qs(urlparse(found.group(1).replace("&amp;", "&")).query) if found else None


def test_the_signals_count_the_agents_train_pairs_and_its_reviewed_buckets(agent, baseline, make_user):
    add_pairs(agent, 3, make_user(Role.REVIEWER))
    review(agent, "wrong_tool", "wrong_tool", "bad_planning")
    other = Agent.objects.create(name="other")
    add_pairs(other, 2, make_user(Role.REVIEWER))
    review(other, "format_error")
    signals = selectors.agent_signals(agent=agent, run=baseline)
    assert signals.preference_pairs == 3 and signals.failure_buckets == {"wrong_tool": 2, "bad_planning": 1}
    assert signals.verifier and signals.judge_agreement is None  # no judge approved
    unmeasured = {**SOMETIMES_RIGHT, "correct_arguments_rate": rate(None, n=0)}
    EvalRun.objects.filter(pk=baseline.pk).update(metrics=unmeasured)
    baseline.refresh_from_db()
    assert not selectors.agent_signals(agent=agent, run=baseline).verifier


def test_with_enough_pairs_the_page_offers_dpo_on_the_newest_pairs_snapshot_before_grpo(client, make_user, agent,
                                                                                       baseline):  # fmt: skip
    reviewer = make_user(Role.REVIEWER)
    add_pairs(agent, 20, reviewer)
    pairs = pair_snapshot_create(actor=reviewer, name="shop pairs", split="train", agent=agent)
    client.force_login(make_user(Role.TRAINER))
    page = client.get(reverse("training:eval_detail", args=[baseline.job_id])).content.decode()
    assert options(page) == ["dpo", "grpo"] and "Recommended next: DPO" in page
    assert "20 preference pairs" in page
    dpo = launch(page, "dpo")
    assert dpo and dpo["kind"] == ["dpo"] and dpo["snapshot"] == [str(pairs.pk)]
    assert dpo["heldout_snapshot"] == [str(baseline.snapshot_id)] and dpo["agent"] == [str(agent.pk)]
    grpo = launch(page, "grpo")
    assert grpo and "snapshot" not in grpo  # no train tasks yet: the trainer picks them; never the pairs
    assert grpo["heldout_snapshot"] == [str(baseline.snapshot_id)]


def test_reviewed_wrong_tools_put_a_prompt_change_first(client, make_user, agent, baseline):
    review(agent, "wrong_tool", "hallucinated_api", "bad_planning")
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:eval_detail", args=[baseline.job_id])).content.decode()
    assert options(page) == ["prompt", "grpo"] and "Recommended next: a prompt change" in page
    assert "67% of the failures are format errors, wrong tools or hallucinated APIs" in page
    assert "data-launch=" not in page  # a viewer launches nothing
