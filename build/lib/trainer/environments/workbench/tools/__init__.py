"""The 27 workplace tools by the names NeMo Gym's workplace assistant gives them.

Each tool is a function of the episode's state and keyword arguments (already checked against
the tool's schema by `trainer.environments.workbench.dispatch`) that returns its JSON result
or raises ToolError with the sentence to show the model.
"""

from __future__ import annotations

from trainer.environments.workbench.tools import (
    analytics,
    calendar,
    company_directory,
    customer_relationship_manager,
    email,
    project_management,
)
from trainer.environments.workbench.tools.common import Tool, ToolError

TOOLS: dict[str, Tool] = {
    **company_directory.TOOLS,
    **email.TOOLS,
    **calendar.TOOLS,
    **analytics.TOOLS,
    **project_management.TOOLS,
    **customer_relationship_manager.TOOLS,
}

__all__ = ["TOOLS", "Tool", "ToolError"]
