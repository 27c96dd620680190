from __future__ import annotations

import gzip
import json

import pytest
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import api_token_create
from flywheel.ingest.models import Step, Trajectory

pytestmark = pytest.mark.django_db
URL = reverse("ingest:api_trajectories")


@pytest.fixture
def reviewer_token(make_user) -> str:
    return api_token_create(user=make_user(Role.REVIEWER), name="agent")[1]


def post(client, token: str | None, body: bytes | str, query: str = "", content_type: str = "application/json"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(f"{URL}?{query}", data=body, content_type=content_type, **headers)


def native(external_id: str, text: str = "hello") -> dict:
    return {"id": external_id, "steps": [{"kind": "user", "text": text}]}


def test_a_batch_gets_one_result_per_item_and_a_retry_is_all_duplicates(client, reviewer_token):
    body = json.dumps({"batch": [native("a"), native("b"), {"steps": "nope"}, [1], native("c", "nul \u0000")]})
    response = post(client, reviewer_token, body)
    assert response.status_code == 207
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["stored", "stored", "rejected", "rejected", "rejected"]
    assert [r["index"] for r in results] == [0, 1, 2, 3, 4]
    assert "NUL character" in results[4]["error"]
    assert "cannot tell the format" in results[2]["error"] and "not an object" in results[3]["error"]
    retry = post(client, reviewer_token, body).json()["results"]
    assert [r["status"] for r in retry[:2]] == ["duplicate", "duplicate"]
    assert retry[0]["id"] == results[0]["id"]
    assert Trajectory.objects.count() == 2


def test_jsonl_and_gzip_bodies_are_accepted_with_hostile_lines_refused(client, reviewer_token):
    lines = [
        json.dumps(native("1")).encode(),
        b'{"x": NaN}',
        b"\xff\xfe",
        b'{"deep": ' + b"[" * 500 + b"]" * 500 + b"}",
    ]
    body = gzip.compress(b"\n".join(lines + [json.dumps(native("2")).encode()]) + b"\n")
    response = post(client, reviewer_token, body, content_type="application/x-ndjson")
    statuses = [r["status"] for r in response.json()["results"]]
    assert response.status_code == 207 and statuses == ["stored", "rejected", "rejected", "rejected", "stored"]


def test_openai_chat_items_are_read_with_the_query_mapping(client, reviewer_token):
    item = {"conv": 7, "ok": 1, "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    query = "format=openai-chat&map=messages=msgs&map=id=conv&map=outcome=ok&agent=chat-bot"
    assert post(client, reviewer_token, json.dumps([item]), query).json()["results"][0]["status"] == "stored"
    trajectory = Trajectory.objects.get()
    assert (trajectory.external_id, trajectory.outcome, trajectory.agent.name) == ("7", "success", "chat-bot")


def test_it_answers_401_without_a_token_and_403_without_the_permission(client, make_user):
    assert post(client, None, "[]").status_code == 401
    viewer_token = api_token_create(user=make_user(Role.VIEWER), name="x")[1]
    assert post(client, viewer_token, "[]").status_code == 403


def test_a_body_or_batch_over_the_limits_gets_413_and_stores_nothing(client, reviewer_token, settings):
    settings.API_MAX_BODY_BYTES = 2048
    assert post(client, reviewer_token, json.dumps([native("x", "y" * 5000)])).status_code == 413
    settings.API_MAX_BODY_BYTES = 1 << 20
    settings.API_MAX_BATCH_ITEMS = 3
    response = post(client, reviewer_token, json.dumps([native(str(n)) for n in range(4)]))
    assert response.status_code == 413 and "at most 3" in response.json()["error"]
    assert not Trajectory.objects.exists()


def test_bad_query_parameters_are_a_400_with_the_reason(client, reviewer_token):
    assert "unknown format" in post(client, reviewer_token, "[]", "format=xml").json()["error"]
    assert "unknown redaction pattern" in post(client, reviewer_token, "[]", "redact=ssn").json()["error"]


def test_redaction_removes_an_email_and_an_api_key_before_storage(client, reviewer_token):
    text = "mail jane.doe@example.com, key sk-proj-abcdefghijklmnop1234 and call +1 415-555-0100"
    response = post(client, reviewer_token, json.dumps([native("r", text)]), "redact=email,api_key")
    assert response.json()["summary"]["redactions"] == 2
    stored = Step.objects.get().text
    assert "jane.doe@example.com" not in stored and "sk-proj-" not in stored
    assert "[REDACTED:email]" in stored and "[REDACTED:api_key]" in stored and "415-555-0100" in stored
    assert "jane.doe" not in Trajectory.objects.get().search_text


HOSTILE_ITEMS = {
    "nan": b'{"id": "bad", "steps": [{"kind": "user", "text": "x"}], "cost": NaN}',
    "deep": b'{"id": "bad", "deep": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    "huge integer": b'{"id": "bad", "n": ' + b"9" * 5000 + b"}",
    "wrong type": b'{"id": "bad", "steps": [{"kind": "user", "text": "x", "latency_ms": "slow"}]}',
    "bad utf-8": b'{"id": "bad", "steps": [{"kind": "user", "text": "\xff\xfe"}]}',
    "lone surrogate": b'{"id": "bad", "steps": [{"kind": "user", "text": "\\udc00"}]}',
}


@pytest.mark.parametrize("kind", HOSTILE_ITEMS)
def test_one_hostile_item_in_a_batch_envelope_is_rejected_alone(client, reviewer_token, kind):
    good = [json.dumps(native(str(number))).encode() for number in range(10)]
    items = good[:6] + [HOSTILE_ITEMS[kind]] + good[6:]
    response = post(client, reviewer_token, b'{"batch": [' + b",\n".join(items) + b"]}")
    assert response.status_code == 207
    results = response.json()["results"]
    assert [r["index"] for r in results] == list(range(11))
    assert [r["index"] for r in results if r["status"] == "rejected"] == [6]
    assert results[6]["error"] and Trajectory.objects.count() == 10


def test_an_envelope_with_more_keys_than_batch_is_still_read_item_by_item(client, reviewer_token):
    body = b'{"metadata": {"sdk": "x"}, "batch": [' + json.dumps(native("a")).encode() + b', {"x": NaN}]}'
    response = post(client, reviewer_token, body)
    assert [r["status"] for r in response.json()["results"]] == ["stored", "rejected"]


def test_a_gzip_bomb_stops_at_the_decompression_cap_with_413(client, reviewer_token, settings):
    settings.API_MAX_DECOMPRESSED_BYTES = 1 << 20
    line = json.dumps(native("x", "y" * 1000)).encode() + b"\n"
    bomb = gzip.compress(line * 2000)  # about 2 MB once decompressed, a few KB on the wire
    response = post(client, reviewer_token, bomb, content_type="application/x-ndjson")
    assert response.status_code == 413
    assert "decompresses to more than 1048576 bytes" in response.json()["error"]
    assert not Trajectory.objects.exists()


def test_a_gzipped_envelope_is_read_like_a_plain_one(client, reviewer_token):
    body = gzip.compress(json.dumps({"batch": [native("a"), native("b")]}).encode())
    response = post(client, reviewer_token, body)
    assert [r["status"] for r in response.json()["results"]] == ["stored", "stored"]


@pytest.mark.parametrize("length", ["abc", "-1", "1e3"])
def test_a_content_length_that_is_not_a_whole_number_is_400(client, reviewer_token, length):
    response = client.post(
        URL, data=b"[]", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {reviewer_token}",
        CONTENT_LENGTH=length,
    )  # fmt: skip
    assert response.status_code == 400 and "Content-Length" in response.json()["error"]
