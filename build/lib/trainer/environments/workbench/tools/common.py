"""What the workplace tools share: the refusal exception, the clock, paging, matching, dates.

A tool refuses by raising ToolError with the sentence the model should read (WorkBench's
own wording, such as "Event not found."); the dispatcher turns it into the observation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import Any

# WorkBench's sandbox clock: the time its tasks, and the system prompt, say it is.
CURRENT_TIME = "2023-11-30 23:59:00"
DEFAULT_PAGE_SIZE = 5

Tool = Callable[..., Any]
"""A tool: the episode's state and keyword arguments in, its JSON result out (or ToolError)."""


class ToolError(Exception):
    """The tool refused the call; the message is what the model sees."""


def contains(text: str | None, query: str) -> bool:
    """Case-insensitive substring match, as WorkBench's searches do; an empty cell never matches."""
    return text is not None and query.lower() in text.lower()


def parse_datetime(value: str, argument: str) -> datetime:
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        raise ToolError(f"Invalid {argument} format. Expected YYYY-MM-DD HH:MM:SS.") from None


def parse_date(value: str, argument: str) -> date:
    try:
        return datetime.fromisoformat(value.strip()).date()
    except ValueError:
        raise ToolError(f"Invalid {argument} format. Expected YYYY-MM-DD.") from None


def paginate(records: Sequence[Mapping[str, Any]], key: str, page: int, page_size: int) -> dict[str, Any]:
    """One page of `records` under `key`, with NeMo Gym's pagination block; a page past the end is the last."""
    if page_size < 1:
        raise ToolError("page_size must be a positive number.")
    total = len(records)
    pages = -(-total // page_size)
    page = max(1, min(page, pages)) if pages else 1
    start = (page - 1) * page_size
    return {
        key: [dict(record) for record in records[start : start + page_size]],
        "pagination": {f"total_{key}": total, "page": page, "page_size": page_size, "total_pages": pages},
    }


def one_of(value: str, allowed: Sequence[str], message: str) -> None:
    if value not in allowed:
        raise ToolError(f"{message} Please choose from: {', '.join(repr(item) for item in allowed)}")
