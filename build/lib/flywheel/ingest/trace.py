"""OpenAI chat messages as the steps the trace viewer (templates/ingest/_trace.html) renders.

Episodes from evaluations and the chat of tasks are OpenAI messages, as production trajectories
are before ingestion: they are read by the same parser (`parsers.openai_chat`), so one viewer shows
all three the same way. The steps are unsaved `Step` rows, numbered from `first` (a page that
shows two traces, context and episode, numbers them on, keeping step ids unique); nothing is stored.
"""

from __future__ import annotations

from typing import Any

from flywheel.ingest.models import Step
from flywheel.ingest.parsers import openai_chat
from flywheel.ingest.parsers.base import FieldMapping


def trace_steps(messages: list[dict[str, Any]], first: int = 0) -> list[Step]:
    """The messages as trace steps; a message the parser refuses raises its RecordError."""
    if not messages:
        return []
    parsed = openai_chat.parse({"messages": messages}, FieldMapping())
    return [
        Step(index=index, kind=step.kind, text=step.text, tool_name=step.tool_name,
             tool_arguments=step.tool_arguments, tool_arguments_raw=step.tool_arguments_raw,
             tool_call_id=step.tool_call_id, is_error=step.is_error)
        for index, step in enumerate(parsed.steps, start=first)
    ]  # fmt: skip
