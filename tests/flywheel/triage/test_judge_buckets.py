"""The LLM judge as a suggester of wrong tool, bad planning and retrieval failure (`flywheel.rewards.buckets`).

The judge's model runs in a `judge` job, tested on a worker in tests/flywheel/rewards/test_judge_worker.py;
here the test writes each job's results file, so every suggestion below is known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.ingest.models import Trajectory
from flywheel.rewards import buckets
from flywheel.rewards import selectors as reward_selectors
from flywheel.rewards.models import AgentJudge, BucketJudging
from flywheel.rewards.services import on_job_finished
from flywheel.training.models import Job, JobKind, JobState
from flywheel.triage.models import Bucket, Review, ReviewState, Suggestion
from flywheel.triage.services import review_submit, suggestions_compute
from flywheel.triage.suggestions import LLM_JUDGE
from tests.flywheel.triage.conftest import call, result, shop_record

pytestmark = pytest.mark.django_db

JUDGED = ["wrong_tool", "bad_planning", "retrieval_failure"]


@pytest.fixture
def shop(store) -> dict[str, Trajectory]:
    """Three failures of the shop agent and one success (never judged)."""
    ask = {"kind": "user", "text": "Refund order 7, please."}
    refund = [call("refund_order", {"order_id": "7", "amount": 5}, "c1"), result("refund_order", "ok")]
    lookup = [call("lookup_order", {"order_id": "8"}, "c2"), result("lookup_order", "order 8", call_id="c2")]
    return store(
        shop_record("f1", [ask, *refund]),
        shop_record("f2", [ask, *lookup]),
        shop_record("f3", [ask, {"kind": "assistant", "text": "Done, refunded."}]),
        shop_record("ok", [ask, {"kind": "assistant", "text": "Refunded."}], outcome="success"),
    )


def finish(judging: BucketJudging, tmp_path: Path, failed: set[str], unreadable: frozenset[str] = frozenset()) -> Job:
    """End the judging's job as a worker would; items of trajectories in `failed` fail the bucket's rubric."""
    job = judging.job
    lines = []
    for case in job.cases:
        external = Trajectory.objects.get(pk=case["id"].split(":")[0]).external_id
        score = None if external in unreadable else (0.2 if external in failed else 0.9)
        passed = None if score is None else score >= 0.5
        lines.append({"id": case["id"], "score": score, "passed": passed, "reason": f"reason for {external}",
                      "raw": "Score: 2"})  # fmt: skip
    path = tmp_path / f"judgements-{job.pk}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    metrics = {"items": len(lines), "unreadable": sum(line["score"] is None for line in lines)}
    result = {"event": "done", "results": str(path), "metrics": metrics}
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, result=result)
    job.refresh_from_db()
    return job


def judge_suggestions() -> set[tuple[str, str]]:
    rows = Suggestion.objects.filter(rule=LLM_JUDGE).select_related("trajectory", "bucket")
    return {(row.trajectory.external_id, row.bucket.slug) for row in rows}


def test_one_judge_job_per_bucket_over_the_failures_awaiting_review(shop, make_user):
    agent = Agent.objects.get(name="shop")
    AgentJudge.objects.create(agent=agent, base_model="judge-model", adapter="/judge/adapter")
    trainer = make_user(Role.TRAINER)
    judgings = buckets.bucket_judging_launch(actor=trainer, agent=agent)
    assert [judging.bucket.slug for judging in judgings] == JUDGED
    failures = {str(shop[name].pk) for name in ("f1", "f2", "f3")}
    for judging in judgings:
        job = judging.job
        assert (job.kind, job.state, job.agent, job.base_model, job.adapter) == (
            JobKind.JUDGE, JobState.QUEUED, agent, "judge-model", "/judge/adapter")  # fmt: skip
        assert job.hyperparameters["rubric"] == buckets.BUCKET_RUBRICS[judging.bucket.slug].to_json()
        assert {case["id"] for case in job.cases} == {f"{pk}:{judging.bucket.slug}" for pk in failures}
        assert set(judging.trajectory_ids) == failures
    f2 = next(case for case in judgings[0].job.cases if case["id"].startswith(str(shop["f2"].pk)))
    assert f2["messages"][0] == {"role": "user", "content": "Refund order 7, please."}
    assert f2["messages"][1]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert f2["messages"][2] == {"role": "tool", "tool_call_id": "c2", "content": "order 8"}


def test_no_job_without_failures_awaiting_review(shop, make_user):
    reviewer = make_user(Role.REVIEWER)
    for name in ("f1", "f2", "f3"):
        review_submit(actor=reviewer, trajectory=shop[name], choices=[])
    with pytest.raises(buckets.BucketJudgingRefused, match="no failed trajectory of shop awaits review"):
        buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=Agent.objects.get(name="shop"))
    assert not Job.objects.exists() and not BucketJudging.objects.exists()


def test_failed_items_become_suggestions_once_with_the_judges_reason(shop, make_user, tmp_path):
    judgings = buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=Agent.objects.get(name="shop"))
    wrong_tool, planning, retrieval = judgings
    job = finish(wrong_tool, tmp_path, failed={"f2"}, unreadable=frozenset({"f3"}))
    assert buckets.bucket_suggestions_store(job=job) == 1
    assert buckets.bucket_suggestions_store(job=job) == 0  # safe to run twice
    on_job_finished(sender=Job, job=finish(planning, tmp_path, failed={"f1", "f2"}))  # through the signal
    assert judge_suggestions() == {("f2", "wrong_tool"), ("f1", "bad_planning"), ("f2", "bad_planning")}
    row = Suggestion.objects.get(rule=LLM_JUDGE, bucket__slug="wrong_tool")
    assert row.reason.startswith("LLM judge (demo) scored the agent 0.20 of 1") and row.reason.endswith("reason for f2")
    wrong_tool.refresh_from_db()
    assert wrong_tool.suggestions == [{"trajectory": str(shop["f2"].pk), "score": 0.2, "reason": "reason for f2"}]
    # The rules' recomputation keeps the judge's suggestions beside their own.
    suggestions_compute(trajectory_ids=[shop["f2"].pk])
    assert ("f2", "wrong_tool") in judge_suggestions()
    assert retrieval.stored_at is None


def test_no_suggestion_for_a_trajectory_reviewed_meanwhile(shop, make_user, tmp_path):
    wrong_tool = buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=Agent.objects.get(name="shop"))[0]
    review_submit(actor=make_user(Role.REVIEWER), trajectory=shop["f1"], choices=[])
    assert Review.objects.get(trajectory=shop["f1"]).state == ReviewState.REVIEWED
    buckets.bucket_suggestions_store(job=finish(wrong_tool, tmp_path, failed={"f1", "f3"}))
    assert judge_suggestions() == {("f3", "wrong_tool")}


def test_a_failed_job_stores_nothing(shop, make_user, tmp_path):
    wrong_tool = buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=Agent.objects.get(name="shop"))[0]
    job = finish(wrong_tool, tmp_path, failed={"f1"})
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED)
    job.refresh_from_db()
    assert buckets.bucket_suggestions_store(job=job) == 0 and not judge_suggestions()


def test_the_list_offers_the_button_to_a_trainer_and_the_post_queues_the_jobs(shop, client, make_user):
    agent = Agent.objects.get(name="shop")
    client.force_login(make_user(Role.TRAINER, agents=[agent]))
    page = client.get(reverse("triage:trajectory_list"), {"agent": "shop"})
    assert b"Suggest wrong tool / bad planning / retrieval failure with the judge" in page.content
    response = client.post(reverse("rewards:judge_buckets_launch", kwargs={"agent_name": "shop"}), follow=True)
    assert b"The judge will look at 3 failed trajectories of shop in 3 jobs" in response.content
    assert Job.objects.filter(kind=JobKind.JUDGE).count() == 3


def test_a_viewer_gets_403_and_an_outsider_404(shop, client, make_user):
    agent = Agent.objects.get(name="shop")
    url = reverse("rewards:judge_buckets_launch", kwargs={"agent_name": "shop"})
    client.force_login(make_user(Role.VIEWER, agents=[agent]))
    assert client.post(url).status_code == 403
    assert b"with the judge" not in client.get(reverse("triage:trajectory_list"), {"agent": "shop"}).content
    other = Agent.objects.create(name="other")
    client.force_login(make_user(Role.TRAINER, agents=[other]))
    assert client.post(url).status_code == 404
    assert not Job.objects.exists()


def test_the_judged_buckets_are_built_in(db):
    assert set(Bucket.objects.filter(built_in=True, slug__in=JUDGED).values_list("slug", flat=True)) == set(JUDGED)


def test_the_newest_failures_only_up_to_the_limit(shop, make_user):
    agent = Agent.objects.get(name="shop")
    newest = [trajectory.external_id for trajectory in buckets.judging_candidates(agent=agent)]
    assert sorted(newest) == ["f1", "f2", "f3"]
    judgings = buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=agent, limit=2)
    assert judgings[0].trajectory_ids == [str(shop[name].pk) for name in newest[:2]]


def test_the_judges_suggestions_show_on_the_list_and_the_review_page(shop, client, make_user, tmp_path):
    wrong_tool = buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=Agent.objects.get(name="shop"))[0]
    buckets.bucket_suggestions_store(job=finish(wrong_tool, tmp_path, failed={"f2"}))
    client.force_login(make_user(Role.REVIEWER))
    listed = client.get(reverse("triage:trajectory_list"), {"agent": "shop", "suggested": "wrong_tool"}).content
    assert b"LLM judge: LLM judge (demo) scored the agent 0.20" in listed and str(shop["f2"].pk).encode() in listed
    review = client.get(reverse("triage:review", kwargs={"trajectory_id": shop["f2"].pk})).content.decode()
    assert '<code class="rule">llm_judge</code>' in review and "reason for f2" in review


# --- the page of the agent's bucket judgings (rewards:judge_buckets) ----------------------------------------


def judgings_page(client, agent_name: str = "shop"):
    return client.get(reverse("rewards:judge_buckets", kwargs={"agent_name": agent_name}))


def between(text: str, start: str, end: str) -> str:
    """The part of `text` from `start` to the first `end` after it."""
    rest = text[text.index(start) :]
    return rest[: rest.index(end)]


def test_the_page_lists_the_judgings_newest_first_with_their_jobs_counts_and_suggestions(
    shop, client, make_user, tmp_path
):
    agent = Agent.objects.get(name="shop")
    trainer = make_user(Role.TRAINER, agents=[agent])
    first = buckets.bucket_judging_launch(actor=trainer, agent=agent)
    buckets.bucket_suggestions_store(job=finish(first[0], tmp_path, failed={"f2"}, unreadable=frozenset({"f3"})))
    later = buckets.bucket_judging_launch(actor=trainer, agent=agent)
    client.force_login(make_user(Role.VIEWER, agents=[agent]))
    page = judgings_page(client)
    assert page.status_code == 200
    rows = [row.judging for row in page.context["rows"]]
    assert rows == [*reversed(later), *reversed(first)]
    text = page.content.decode()
    done, queued = (between(text, f'id="judging-{judging.pk}"', "</tr>") for judging in (first[0], later[0]))
    assert reverse("training:job_detail", args=[first[0].job_id]) in done and 'data-job-state="succeeded"' in done
    assert trainer.username in done and "Wrong tool" in done and "demo" in done
    for figure, value in (("asked", 3), ("judged", 3), ("unreadable", 1), ("suggested", 1)):
        assert f"<td data-{figure}>{value}</td>" in done
    made = between(text, f'data-suggestions="{first[0].pk}"', "</details>")
    assert reverse("triage:review", args=[shop["f2"].pk]) in made and ">f2</a>" in made
    assert "<td>0.20</td><td>reason for f2</td>" in made
    assert 'data-job-state="queued"' in queued and "<td data-judged>—</td>" in queued
    assert "<td data-suggested>—</td>" in queued


def test_a_judging_keeps_what_it_suggested_after_a_later_one_replaces_it(shop, client, make_user, tmp_path):
    agent = Agent.objects.get(name="shop")
    trainer = make_user(Role.TRAINER, agents=[agent])
    earlier = buckets.bucket_judging_launch(actor=trainer, agent=agent)[0]
    buckets.bucket_suggestions_store(job=finish(earlier, tmp_path, failed={"f1"}))
    later = buckets.bucket_judging_launch(actor=trainer, agent=agent)[0]
    buckets.bucket_suggestions_store(job=finish(later, tmp_path, failed={"f1"}))
    assert Suggestion.objects.filter(rule=LLM_JUDGE).count() == 1  # the later one's
    client.force_login(trainer)
    listed = {row.judging.pk: [made.label for made in row.suggestions] for row in judgings_page(client).context["rows"]}
    assert listed[earlier.pk] == listed[later.pk] == ["f1"]


def test_the_page_shows_a_gone_trajectory_by_its_id(shop, client, make_user, tmp_path):
    agent = Agent.objects.get(name="shop")
    judging = buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=agent)[0]
    buckets.bucket_suggestions_store(job=finish(judging, tmp_path, failed={"f1"}))
    gone = str(shop["f1"].pk)
    Trajectory.objects.filter(pk=gone).delete()
    client.force_login(make_user(Role.VIEWER, agents=[agent]))
    assert f"{gone} (gone)" in judgings_page(client).content.decode()


def test_the_page_is_for_members_of_the_agent_and_names_no_other_agents_judgings(shop, client, make_user):
    agent = Agent.objects.get(name="shop")
    buckets.bucket_judging_launch(actor=make_user(Role.TRAINER), agent=agent)
    other = Agent.objects.create(name="other")
    client.force_login(make_user(Role.TRAINER, agents=[other]))
    assert judgings_page(client).status_code == 404
    page = judgings_page(client, "other")
    assert page.status_code == 200 and page.context["rows"] == []
    assert "has not been asked about other's buckets yet" in page.content.decode()


def test_the_triage_list_filtered_to_an_agent_links_to_it_for_a_viewer_too(shop, client, make_user):
    agent = Agent.objects.get(name="shop")
    url = reverse("rewards:judge_buckets", kwargs={"agent_name": "shop"})
    client.force_login(make_user(Role.VIEWER, agents=[agent]))
    listed = client.get(reverse("triage:trajectory_list"), {"agent": "shop"}).content.decode()
    assert f'href="{url}" data-judgings-link' in listed and "with the judge" not in listed
    assert "data-judgings-link" not in client.get(reverse("triage:trajectory_list")).content.decode()


def test_the_listing_is_bounded_newest_first_and_empty_for_a_viewer_of_other_agents(shop, make_user):
    agent = Agent.objects.get(name="shop")
    trainer = make_user(Role.TRAINER, agents=[agent])
    launched = buckets.bucket_judging_launch(actor=trainer, agent=agent)
    newest = [row.judging for row in reward_selectors.bucket_judging_list(viewer=trainer, agent=agent, limit=2)]
    assert newest == launched[:0:-1]
    outsider = make_user(Role.TRAINER, agents=[Agent.objects.create(name="other")])
    assert reward_selectors.bucket_judging_list(viewer=outsider, agent=agent) == []
