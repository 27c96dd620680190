"""The LLM judge as a bucket suggester, for the three failure buckets no rule can see.

Wrong tool, bad planning and retrieval failure need judgement (`flywheel.triage.suggestions`).
`bucket_judging_launch` asks the agent's judge (its AgentJudge model and adapter) about an agent's
newest failed trajectories that no reviewer has reviewed yet: one `judge` job per bucket, since a
job carries one rubric, each item a trajectory as OpenAI messages, named `<trajectory id>:<slug>`.
Each rubric asks whether the agent did that part right; an item the judge fails becomes an
`llm_judge` suggestion of the bucket, with the judge's score and reason, when the job succeeds
(`bucket_suggestions_store`, from the `job_finished` receiver). An unreadable reply suggests nothing.

Suggestions are hints a reviewer accepts or not, never training signal, so they do not wait for
the judge's approval; how far to trust them is the agreement the reward profile measures.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from flywheel.core.models import Agent
from flywheel.core.services import audit_record
from flywheel.datasets.conversion import steps_messages
from flywheel.ingest.models import Outcome, Step, Trajectory
from flywheel.rewards.judge_jobs import judge_job_launch
from flywheel.rewards.models import BucketJudging
from flywheel.training.models import Job, JobState
from flywheel.training.services import LaunchRefused
from flywheel.triage.models import Bucket, ReviewState, Suggestion
from flywheel.triage.suggestions import LLM_JUDGE
from trainer.contracts import read_json_lines
from trainer.verifiers.judge import JudgeItem, Rubric

MAX_TRAJECTORIES = 50

# Each asks whether the agent did it right, the way the judge's prompt grades (0 fails, the top passes).
BUCKET_RUBRICS: dict[str, Rubric] = {
    "wrong_tool": Rubric(
        criteria="Did the agent call the right tools? It fails if it called a tool that does not serve the user's "
        "request, or answered without the tool the request needed.",
        pass_means="Every tool the agent called serves the request, and no tool the request needed was left out.",
    ),
    "bad_planning": Rubric(
        criteria="Did the agent plan its steps well? It fails if it took steps in the wrong order (such as changing "
        "something before looking it up), repeated steps for nothing, or skipped a step the request needed.",
        pass_means="The steps come in a sensible order, none redundant and none missing.",
    ),
    "retrieval_failure": Rubric(
        criteria="Did the agent find and use the information it needed? It fails if it did not look up what it "
        "needed, looked in the wrong place, or ignored or misread what the tools returned.",
        pass_means="The agent retrieved the information the request needed and used it faithfully.",
    ),
}


class BucketJudgingRefused(Exception):
    """Nothing to judge, or the job launch was refused; the message says why."""


def awaiting_review(queryset: Any) -> Any:
    """Trajectories no reviewer has reviewed (no review row, or one not marked reviewed)."""
    return queryset.filter(Q(review__isnull=True) | ~Q(review__state=ReviewState.REVIEWED))


def judging_candidates(*, agent: Agent, limit: int = MAX_TRAJECTORIES) -> list[Trajectory]:
    """The agent's newest failed trajectories that await review, at most `limit`."""
    rows = awaiting_review(Trajectory.objects.filter(agent=agent, outcome=Outcome.FAILURE))
    return list(rows.order_by("-ingested_at", "-pk")[:limit])


def item_id(trajectory_id: UUID | str, slug: str) -> str:
    return f"{trajectory_id}:{slug}"


def _conversations(trajectories: list[Trajectory]) -> dict[UUID, list[dict[str, Any]]]:
    steps: dict[UUID, list[Step]] = defaultdict(list)
    for step in Step.objects.filter(trajectory__in=trajectories).order_by("trajectory_id", "index"):
        steps[step.trajectory_id].append(step)
    return {trajectory.pk: steps_messages(steps[trajectory.pk]) for trajectory in trajectories}


@transaction.atomic
def bucket_judging_launch(*, actor: User, agent: Agent, limit: int = MAX_TRAJECTORIES) -> list[BucketJudging]:
    """Queue one `judge` job per bucket the rules cannot see, over the agent's newest failures awaiting review."""
    messages = {pk: chat for pk, chat in _conversations(judging_candidates(agent=agent, limit=limit)).items() if chat}
    if not messages:
        raise BucketJudgingRefused(f"no failed trajectory of {agent.name} awaits review: nothing for the judge")
    buckets = {bucket.slug: bucket for bucket in Bucket.objects.filter(slug__in=BUCKET_RUBRICS)}
    judgings = []
    for slug, rubric in BUCKET_RUBRICS.items():
        items = [JudgeItem(id=item_id(pk, slug), messages=chat).to_json() for pk, chat in messages.items()]
        try:
            job = judge_job_launch(actor=actor, agent=agent, items=items, rubric=rubric.to_json())
        except LaunchRefused as error:
            raise BucketJudgingRefused(str(error)) from None
        judgings.append(BucketJudging.objects.create(
            agent=agent, job=job, bucket=buckets[slug], trajectory_ids=[str(pk) for pk in messages],
            base_model=job.base_model, adapter=job.adapter, rubric=rubric.to_json(), created_by=actor,
        ))  # fmt: skip
    audit_record(actor=actor, action="judge.suggest_buckets", target=agent,
                 data={"trajectories": len(messages), "jobs": [str(j.job_id) for j in judgings]})  # fmt: skip
    return judgings


def suggestion_reason(judging: BucketJudging, score: float, reason: str) -> str:
    rubric = Rubric.from_json(judging.rubric)
    return (f"LLM judge ({judging.base_model}) scored the agent {score:.2f} of 1 on this bucket's rubric, "
            f"below its pass mark {rubric.pass_score:g}: {reason}")  # fmt: skip


@transaction.atomic
def bucket_suggestions_store(*, job: Job) -> int:
    """Turn a succeeded bucket judging's failed items into `llm_judge` suggestions, once; how many were stored.

    Only for trajectories still of the judging's agent and still awaiting review: a reviewer's
    buckets are never second-guessed afterwards. An earlier judging's suggestion of the same bucket
    on the same trajectory is replaced.
    """
    judging = BucketJudging.objects.select_for_update().select_related("bucket").filter(job=job).first()
    if judging is None or job.state != JobState.SUCCEEDED or judging.stored_at is not None:
        return 0
    still_open = awaiting_review(Trajectory.objects.filter(agent=judging.agent, pk__in=judging.trajectory_ids))
    eligible = {str(pk) for pk in still_open.values_list("pk", flat=True)}
    rows, made = [], []
    for line in read_json_lines(job.result["results"]):
        trajectory_id, _, slug = str(line["id"]).rpartition(":")
        if slug != judging.bucket.slug or trajectory_id not in eligible or line["passed"] is not False:
            continue
        reason = suggestion_reason(judging, float(line["score"]), str(line["reason"]))
        rows.append(Suggestion(trajectory_id=trajectory_id, bucket=judging.bucket, rule=LLM_JUDGE, reason=reason))
        made.append({"trajectory": trajectory_id, "score": float(line["score"]), "reason": str(line["reason"])})
    Suggestion.objects.filter(rule=LLM_JUDGE, bucket=judging.bucket,
                              trajectory_id__in=[row.trajectory_id for row in rows]).delete()  # fmt: skip
    Suggestion.objects.bulk_create(rows)
    judging.suggested, judging.suggestions, judging.stored_at = len(rows), made, timezone.now()
    judging.save(update_fields=["suggested", "suggestions", "stored_at"])
    return len(rows)
