"""The one way the app asks the agent's LLM judge for verdicts: a `judge` job on the gpu queue.

Reward profiling (agreement with reviewers), the bucket suggester and online scoring all launch
it here, so each runs the judge the team set for the agent (its AgentJudge model and adapter).
"""

from __future__ import annotations

from typing import Any

from flywheel.core.models import Agent
from flywheel.core.services import Actor
from flywheel.rewards.selectors import judge_settings
from flywheel.training.models import Job, JobKind
from flywheel.training.services import job_launch


def judge_job_launch(*, actor: Actor, agent: Agent, items: list[dict[str, Any]],
                     rubric: dict[str, Any] | None = None) -> Job:  # fmt: skip
    """Queue the agent's judge over `items` (`trainer.spec.judge`), on its own rubric unless another is given.

    Raises LaunchRefused as `job_launch` does. The job records the model, adapter and rubric it runs with.
    """
    judge = judge_settings(agent=agent)
    return job_launch(actor=actor, kind=JobKind.JUDGE, snapshot=None, base_model=judge.base_model,
                      adapter=judge.adapter, agent=agent, cases=items,
                      hyperparameters={"rubric": judge.rubric if rubric is None else rubric})  # fmt: skip
