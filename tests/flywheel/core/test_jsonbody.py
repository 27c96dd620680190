"""Untrusted JSON bodies and form fields: every bad one is a 400 (or 413) with a message, never a 500."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import RequestFactory
from django.urls import reverse

from flywheel.core.jsonbody import JsonInputError, json_object_from_body, json_parse
from flywheel.core.roles import Role
from flywheel.core.services import api_token_create

DEEP = "[" * 5000 + "]" * 5000
HOSTILE_BODIES = {
    "invalid JSON": (b"{not json", "not valid JSON"),
    "deep nesting": (DEEP.encode(), "nests deeper than 64 levels"),
    "moderate nesting": (("[" * 100 + "]" * 100).encode(), "nests deeper than 64 levels"),
    "NaN": (b'{"a": NaN}', "NaN is not valid JSON"),
    "a number too large": (b'{"a": 1e400}', "too large"),
    "a huge integer": (b'{"a": ' + b"9" * 5000 + b"}", "not valid JSON"),
    "bad UTF-8": (b'{"a": "\xff"}', "not valid UTF-8"),
    "a lone surrogate": (b'{"a": "\\ud800"}', "invalid Unicode"),
    "a NUL": (b'{"a": "\\u0000"}', "NUL"),
    "an array": (b"[1, 2]", "must be a JSON object, not a JSON array"),
}


def body_request(body: bytes, **meta: str):
    return RequestFactory().post("/x", data=body, content_type="application/json", **meta)


@pytest.mark.parametrize("kind", HOSTILE_BODIES)
def test_a_hostile_body_is_a_400_with_the_reason(kind):
    body, reason = HOSTILE_BODIES[kind]
    with pytest.raises(JsonInputError) as refused:
        json_object_from_body(body_request(body), max_bytes=1 << 20)
    assert refused.value.status == 400 and reason in refused.value.message


def test_a_good_body_and_an_empty_one_are_objects():
    assert json_object_from_body(body_request(b'{"a": [1, 2.5, "x"]}'), max_bytes=100) == {"a": [1, 2.5, "x"]}
    assert json_object_from_body(body_request(b""), max_bytes=100) == {}


@pytest.mark.parametrize("length", ["abc", "-5", "12x", "١٢"])
def test_a_content_length_that_is_not_a_whole_number_is_a_400(length):
    with pytest.raises(JsonInputError) as refused:
        json_object_from_body(body_request(b"{}", CONTENT_LENGTH=length), max_bytes=100)
    assert refused.value.status == 400 and "Content-Length" in refused.value.message


def test_a_body_declared_over_the_cap_is_a_413_before_it_is_read():
    with pytest.raises(JsonInputError) as refused:
        json_object_from_body(body_request(b"{}" + b" " * 200), max_bytes=100)
    assert refused.value.status == 413 and "larger than 100 bytes" in refused.value.message


def test_a_form_field_names_its_own_problem():
    with pytest.raises(JsonInputError, match="messages nests deeper"):
        json_parse(DEEP, what="messages")


@pytest.fixture
def bearer(make_user):
    def token_for(role: Role) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {api_token_create(user=make_user(role), name='t')[1]}"}

    return token_for


ENDPOINT_BODIES = [
    (b"{not json", {}, "not valid JSON"),
    (DEEP.encode(), {}, "nests deeper"),
    (b'{"model": "a"}', {"CONTENT_LENGTH": "many"}, "Content-Length"),
    (b"[1]", {}, "must be a JSON object"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "meta", "reason"), ENDPOINT_BODIES)
def test_chat_completions_answers_400_in_openai_form(client, bearer, body, meta, reason):
    response = client.post(
        reverse("registry:chat_completions"), body, content_type="application/json", **bearer(Role.VIEWER), **meta
    )
    assert response.status_code == 400 and reason in response.json()["error"]["message"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "reason"),
    [({"model": "a", "messages": "hi"}, "messages"), ({"model": "a", "messages": [1]}, "messages")],
)
def test_chat_completions_refuses_messages_of_the_wrong_type(client, bearer, body, reason):
    response = client.post(
        reverse("registry:chat_completions"), json.dumps(body), content_type="application/json", **bearer(Role.VIEWER)
    )
    assert response.status_code == 400 and reason in response.json()["error"]["message"]


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "meta", "reason"), ENDPOINT_BODIES)
def test_the_jobs_api_answers_400(client, bearer, body, meta, reason):
    response = client.post(
        reverse("training:api_jobs"), body, content_type="application/json", **bearer(Role.TRAINER), **meta
    )
    assert response.status_code == 400 and reason in response.json()["error"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value"),
    [("kind", ["eval"]), ("base_model", {"a": 1}), ("hyperparameters", [1]), ("adapter", 5), ("snapshot", [1])],
)
def test_the_jobs_api_refuses_fields_of_the_wrong_type(client, bearer, field, value):
    body = json.dumps({"kind": "eval", "snapshot": "x", "base_model": "m", field: value})
    response = client.post(reverse("training:api_jobs"), body, content_type="application/json", **bearer(Role.TRAINER))
    assert response.status_code == 400 and field in response.json()["error"]


@pytest.mark.django_db
@pytest.mark.parametrize("text", [DEEP, '[{"role": "user", "content": NaN}]', '"\\ud800"'])
def test_the_task_forms_refuse_hostile_json_as_a_form_error(text):
    from flywheel.datasets.forms import TaskEditForm, TaskWriteForm

    write = TaskWriteForm(data={"external_id": "t1", "split": "heldout", "messages": text, "tools": "[]"})
    assert not write.is_valid() and "messages" in " ".join(write.non_field_errors())
    edit = TaskEditForm(data={"split": "heldout", "messages": text, "expected_calls": "[]"}, base={"id": "t1"})
    assert not edit.is_valid() and "messages" in " ".join(edit.non_field_errors())


@pytest.mark.parametrize(("text", "reason"), [(DEEP, "nests deeper"), ('{"lr": NaN}', "NaN"), ("[1]", "a JSON object")])
def test_a_json_object_form_field_refuses_hostile_text_as_a_form_error(text, reason):
    from flywheel.core.forms import JSONObjectField

    with pytest.raises(ValidationError) as refused:
        JSONObjectField(example='{"lr": 0.0001}').clean(text)
    assert reason in " ".join(refused.value.messages)
