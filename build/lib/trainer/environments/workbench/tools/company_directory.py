"""The company directory tool: the addresses whose text contains a name (case-insensitive)."""

from __future__ import annotations

from typing import Any

from trainer.environments.workbench.state import WorkbenchState
from trainer.environments.workbench.tools.common import Tool, ToolError, contains


def find_email_address(state: WorkbenchState, name: str = "") -> Any:
    if not name:
        raise ToolError("Name not provided.")
    return [address for address in state.directory if contains(address, name)]


TOOLS: dict[str, Tool] = {"company_directory_find_email_address": find_email_address}
