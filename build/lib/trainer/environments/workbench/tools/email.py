"""The email tools: look up, search, send, delete, forward and reply.

Behaviour follows NeMo Gym's workplace assistant: a search matches an email when every word
of the query is in its subject, body or address (case-insensitive), lists the latest first,
five to a page, and its date bounds are inclusive days. Sending appends an outbox email
dated at the sandbox clock to a lower-cased recipient; forwarding sends "FW: <subject>" with
the body, replying sends "RE: <subject>" to the email's address. New ids are zero-padded to
eight digits like the starting ones (NeMo Gym leaves them unpadded; the judge ignores new ids).
"""

from __future__ import annotations

from typing import Any

from trainer.environments.workbench.data import Row
from trainer.environments.workbench.state import WorkbenchState
from trainer.environments.workbench.tools.common import (
    CURRENT_TIME,
    DEFAULT_PAGE_SIZE,
    Tool,
    ToolError,
    paginate,
    parse_date,
)


def get_email_information_by_id(state: WorkbenchState, email_id: str | None = None, field: str | None = None) -> Any:
    if not email_id:
        raise ToolError("Email ID not provided.")
    if not field:
        raise ToolError("Field not provided.")
    email = _email(state, email_id)
    if field not in email:
        raise ToolError(f"Field '{field}' not found. Available fields: {', '.join(email)}")
    return {field: email[field]}


def search_emails(
    state: WorkbenchState,
    query: str = "",
    date_min: str | None = None,
    date_max: str | None = None,
    page: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Any:
    words = query.lower().split()
    first = parse_date(date_min, "date_min").isoformat() if date_min else None
    last = parse_date(date_max, "date_max").isoformat() if date_max else None
    found = []
    for email in state.emails.values():
        searched = f"{email['subject']} {email['body']} {email['sender/recipient']}".lower()
        day = (email["sent_datetime"] or "")[:10]
        if (
            all(word in searched for word in words)
            and (first is None or day >= first)
            and (last is None or day <= last)
        ):
            found.append(email)
    if not found:
        return "No emails found."
    found.sort(key=lambda email: email["sent_datetime"] or "", reverse=True)
    return paginate(found, "emails", page, page_size)


def send_email(
    state: WorkbenchState, recipient: str | None = None, subject: str | None = None, body: str | None = None
) -> Any:
    if not recipient or not subject or not body:
        raise ToolError("Recipient, subject, or body not provided.")
    _check_recipient(recipient)
    _send(state, recipient, subject, body)
    return "Email sent successfully."


def delete_email(state: WorkbenchState, email_id: str | None = None) -> Any:
    if not email_id:
        raise ToolError("Email ID not provided.")
    _email(state, email_id)
    state.emails.delete(email_id)
    return "Email deleted successfully."


def forward_email(state: WorkbenchState, email_id: str | None = None, recipient: str | None = None) -> Any:
    if not email_id or not recipient:
        raise ToolError("Email ID or recipient not provided.")
    _check_recipient(recipient)
    email = _email(state, email_id)
    _send(state, recipient, f"FW: {email['subject']}", email["body"] or "")
    return "Email forwarded successfully."


def reply_email(state: WorkbenchState, email_id: str | None = None, body: str | None = None) -> Any:
    if not email_id or not body:
        raise ToolError("Email ID or body not provided.")
    email = _email(state, email_id)
    _send(state, email["sender/recipient"] or "", f"RE: {email['subject']}", body)
    return "Email replied successfully."


def _check_recipient(recipient: str) -> None:
    if "@" not in recipient or "." not in recipient:
        raise ToolError("Invalid recipient email address.")


def _send(state: WorkbenchState, recipient: str, subject: str, body: str) -> None:
    state.emails.insert(
        {
            "inbox/outbox": "outbox",
            "sender/recipient": recipient.lower(),
            "subject": subject,
            "sent_datetime": CURRENT_TIME,
            "body": body,
        }
    )


def _email(state: WorkbenchState, email_id: str) -> Row:
    email = state.emails.get(email_id)
    if email is None:
        raise ToolError("Email not found.")
    return email


TOOLS: dict[str, Tool] = {
    "email_get_email_information_by_id": get_email_information_by_id,
    "email_search_emails": search_emails,
    "email_send_email": send_email,
    "email_delete_email": delete_email,
    "email_forward_email": forward_email,
    "email_reply_email": reply_email,
}
