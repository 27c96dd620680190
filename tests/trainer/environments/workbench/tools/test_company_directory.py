"""The company directory tool."""

from __future__ import annotations

import pytest

from trainer.environments.workbench.tools import ToolError
from trainer.environments.workbench.tools.company_directory import find_email_address


def test_a_name_finds_every_address_containing_it_case_insensitively(state):
    assert find_email_address(state, "Nadia") == ["nadia.moreau@atlas.com"]
    assert find_email_address(state, "pat") == ["anaya.patel@atlas.com", "raj.patel@atlas.com"]
    assert find_email_address(state, "zed") == []


def test_an_empty_name_is_refused(state):
    with pytest.raises(ToolError, match="Name not provided."):
        find_email_address(state, "")
