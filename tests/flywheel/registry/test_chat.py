"""`POST /v1/chat/completions` through the real `openai` client: the live adapter answers, on the tiny model.

The app starts its own `python -m trainer serve` for the live version and switches it when the
live version changes; the agent tags its trajectories with the `model` the answer names.
"""

from __future__ import annotations

import json

import openai
import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import Trajectory
from flywheel.registry import selectors, services, serving
from tests.flywheel.registry.conftest import QUESTION

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def ask(chat: openai.OpenAI):
    return chat.chat.completions.create(model="support-bot", messages=QUESTION, max_tokens=8)


def test_the_chat_endpoint_answers_from_the_live_adapter_and_follows_promote_and_rollback(
    client, live_server, managed_server, make_user, register, monkeypatch
):
    verified, verify = [], serving.Target.verified_adapter
    monkeypatch.setattr(serving.Target, "verified_adapter", lambda t: verified.append(t.tag) or verify(t))
    first, second = register(0), register(1)
    approver = make_user(Role.APPROVER)
    services.version_promote(actor=approver, version=first, reason="first ship, no gate")
    token = api_token_create(user=make_user(Role.REVIEWER), name="support-bot")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=120)

    from_first = ask(chat)
    assert from_first.model == "support-bot:v1"
    assert from_first.model_extra["flywheel"]["adapter_sha256"] == first.adapter_sha256
    assert from_first.system_fingerprint == f"adapter-{first.adapter_sha256[:16]}"
    assert from_first.choices[0].message.content
    assert ask(chat).model == "support-bot:v1" and len(verified) == 1  # hashed when handed over, not per request

    services.version_promote(actor=approver, version=second, reason="second")
    from_second = ask(chat)
    assert from_second.model == "support-bot:v2"
    assert from_second.model_extra["flywheel"]["adapter_sha256"] == second.adapter_sha256
    assert from_second.choices[0].message.content != from_first.choices[0].message.content

    services.version_rollback(actor=approver, agent=first.agent, reason="v2 is worse")
    after_rollback = ask(chat)
    assert verified == ["support-bot:v1", "support-bot:v2", "support-bot:v1"]  # start, switch, switch back
    assert after_rollback.model == "support-bot:v1"
    assert after_rollback.model_extra["flywheel"]["adapter_sha256"] == first.adapter_sha256
    assert after_rollback.choices[0].message.content == from_first.choices[0].message.content  # same adapter, greedy

    # The agent reports the trajectory with the version it was answered by: the flywheel closes.
    record = {"id": "conversation-1", "model_version": after_rollback.model, "outcome": "failure",
              "steps": [{"kind": "user", "text": QUESTION[0]["content"]},
                        {"kind": "assistant", "text": after_rollback.choices[0].message.content}]}  # fmt: skip
    response = client.post(f"{reverse('ingest:api_trajectories')}?agent=support-bot", json.dumps([record]),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert response.json()["results"][0]["status"] == "stored"
    trajectory = Trajectory.objects.get(external_id="conversation-1")
    assert selectors.version_by_tag(tag=trajectory.model_version, viewer=approver) == first
    rows = selectors.failures_by_version(agent=first.agent)
    assert [(row.version, row.total, row.failures) for row in rows] == [(first, 1, 1)]


def test_the_chat_endpoint_needs_a_token_and_a_live_version(live_server, make_user, agent):
    anonymous = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key="fwk_not-a-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        anonymous.chat.completions.create(model="support-bot", messages=QUESTION)
    token = api_token_create(user=make_user(Role.VIEWER), name="x")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.NotFoundError, match="no live version"):
        chat.chat.completions.create(model="support-bot", messages=QUESTION)
    nobody = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=api_token_create(user=make_user(None),
                                                                                       name="y")[1], max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        nobody.chat.completions.create(model="support-bot", messages=QUESTION)


def test_a_changed_live_adapter_is_refused_before_any_server_gets_it(live_server, managed_server, make_user, register):
    live = register(0)
    services.version_promote(actor=make_user(Role.APPROVER), version=live, reason="first ship")
    weights = selectors.adapter_location(version=live) / "adapter_model.safetensors"
    weights.chmod(0o644)
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    token = api_token_create(user=make_user(Role.REVIEWER), name="support-bot")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=120)

    with pytest.raises(openai.APIStatusError) as refused:
        ask(chat)
    assert refused.value.status_code == 503 and "failed verification" in str(refused.value)
    assert serving.MANAGED.url == ""  # nothing was started with it


def test_a_streamed_request_to_the_trainer_server_is_refused_in_json(live_server, managed_server, make_user, register):
    services.version_promote(actor=make_user(Role.APPROVER), version=register(0), reason="first ship")
    token = api_token_create(user=make_user(Role.REVIEWER), name="support-bot")[1]
    chat = openai.OpenAI(base_url=f"{live_server.url}/v1", api_key=token, max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError, match="streaming is not supported"):
        list(chat.chat.completions.create(model="support-bot", messages=QUESTION, max_tokens=8, stream=True))
