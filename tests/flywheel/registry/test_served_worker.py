"""The whole path on real processes: the `openai` client asks the app, `trainer serve` answers with the
tiny model's live adapter, and a real Celery worker stores the answer as one tagged, priced trajectory."""

from __future__ import annotations

import time

import openai
import pytest

from flywheel.core.roles import Role
from flywheel.core.services import agent_prices_set, api_token_create
from flywheel.ingest.models import Trajectory
from flywheel.registry import services
from tests.flywheel.registry.conftest import QUESTION

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def wait_for_trajectories(count: int, timeout: float = 90) -> list[Trajectory]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = list(Trajectory.objects.all())
        if len(rows) >= count:
            return rows
        time.sleep(0.3)
    raise AssertionError(f"{count} trajectory(ies) expected within {timeout} s; found {Trajectory.objects.count()}")


def test_a_served_answer_becomes_one_trajectory_through_a_real_worker(
    live_server, managed_server, make_user, register, celery_worker_process
):
    celery_worker_process("default")
    live = register(0)
    agent_prices_set(actor=None, agent=live.agent, input_per_million=3.0, output_per_million=15.0)
    services.version_promote(actor=make_user(Role.APPROVER), version=live, reason="first ship")
    token = api_token_create(user=make_user(Role.VIEWER), name="support-bot")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=120)

    answer = chat.chat.completions.create(model="support-bot", messages=QUESTION, max_tokens=8)

    [trajectory] = wait_for_trajectories(1)
    time.sleep(1)  # a second message, were there one, would have been stored by now
    assert Trajectory.objects.count() == 1
    assert (trajectory.agent, trajectory.external_id) == (live.agent, answer.id)
    assert trajectory.model_version == "support-bot:v1" == answer.model
    assert trajectory.metadata["served"]["adapter_sha256"] == live.adapter_sha256
    assert (trajectory.input_tokens, trajectory.output_tokens) == (answer.usage.prompt_tokens,
                                                                   answer.usage.completion_tokens)  # fmt: skip
    usage = answer.usage
    assert trajectory.cost == pytest.approx((usage.prompt_tokens * 3.0 + usage.completion_tokens * 15.0) / 1e6)
    steps = list(trajectory.steps.values_list("kind", "text"))
    assert steps == [("user", QUESTION[0]["content"]), ("assistant", answer.choices[0].message.content)]
