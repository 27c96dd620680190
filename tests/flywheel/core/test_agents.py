from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.core.services import agent_create, tools_normalize

BARE_TOOL = {"name": "get_weather", "description": "Weather now", "parameters": {"type": "object"}}


def test_bare_tool_schemas_are_wrapped_in_openai_form():
    assert tools_normalize([BARE_TOOL]) == [{"type": "function", "function": BARE_TOOL}]


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ({"name": "x"}, "must be a JSON list"),
        ([{"description": "no name"}], "tool 0 has no name"),
        ([{"name": "x", "parameters": "a string"}], "parameters must be a JSON Schema object"),
        ([BARE_TOOL, BARE_TOOL], "duplicate tool names: get_weather"),
    ],
)
def test_bad_tool_catalogues_are_refused_with_a_reason(tools, message):
    with pytest.raises(ValidationError, match=message):
        tools_normalize(tools)


@pytest.mark.django_db
def test_the_agent_page_shows_its_tool_catalogue(client, make_user):
    agent_create(actor=None, name="workplace", tools=[BARE_TOOL])
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("core:agent_detail", args=["workplace"])).content.decode()
    assert "get_weather" in page and "&quot;type&quot;: &quot;object&quot;" in page
