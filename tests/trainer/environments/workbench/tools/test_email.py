"""The email tools behave as NeMo Gym's workplace assistant's do, on WorkBench's emails."""

from __future__ import annotations

import pytest

from trainer.environments.workbench.tools import ToolError
from trainer.environments.workbench.tools.common import CURRENT_TIME
from trainer.environments.workbench.tools.email import (
    delete_email,
    forward_email,
    get_email_information_by_id,
    reply_email,
    search_emails,
    send_email,
)


def new_emails(state):
    return [dict(email) for email in state.emails.values() if not state.emails.is_starting_row(email["email_id"])]


def test_a_lookup_returns_the_field_and_an_unknown_field_lists_the_real_ones(state):
    assert get_email_information_by_id(state, "00000259", "subject") == {
        "subject": "Task Update on Create wireframe for homepage"
    }
    with pytest.raises(ToolError, match="Field 'sender' not found. Available fields: email_id, inbox/outbox"):
        get_email_information_by_id(state, "00000259", "sender")


def test_a_search_needs_every_word_somewhere_and_lists_the_latest_first(state):
    found = search_emails(state, query="Kofi wireframe", page_size=50)
    assert found["emails"][0]["email_id"] == "00000259"
    assert all("wireframe" in (e["subject"] + e["body"]).lower() for e in found["emails"])
    dates = [email["sent_datetime"] for email in found["emails"]]
    assert dates == sorted(dates, reverse=True)


def test_a_search_counts_its_date_bounds_as_whole_days(state):
    found = search_emails(state, query="kofi", date_min="2023-11-22", date_max="2023-11-22")
    assert [email["email_id"] for email in found["emails"]] == ["00000259"]
    assert search_emails(state, query="kofi", date_min="2024-01-01") == "No emails found."


def test_sending_appends_an_outbox_email_at_the_sandbox_clock(state):
    assert send_email(state, "Nia.Johnson@atlas.com", "Hi", "Body") == "Email sent successfully."
    assert new_emails(state) == [
        {
            "email_id": "00000500",
            "inbox/outbox": "outbox",
            "sender/recipient": "nia.johnson@atlas.com",
            "subject": "Hi",
            "sent_datetime": CURRENT_TIME,
            "body": "Body",
        }
    ]


@pytest.mark.parametrize(("recipient", "message"), [("", "not provided"), ("nia", "Invalid recipient")])
def test_an_email_without_a_valid_recipient_is_not_sent(state, recipient, message):
    with pytest.raises(ToolError, match=message):
        send_email(state, recipient, "Hi", "Body")
    assert new_emails(state) == []


def test_forwarding_sends_the_subject_marked_fw_and_the_body(state):
    original = state.emails.get("00000259")
    assert forward_email(state, "00000259", "raj.patel@atlas.com") == "Email forwarded successfully."
    [sent] = new_emails(state)
    assert (sent["subject"], sent["body"]) == (f"FW: {original['subject']}", original["body"])


def test_replying_answers_the_sender_with_the_subject_marked_re(state):
    assert reply_email(state, "00000259", "Thanks") == "Email replied successfully."
    [sent] = new_emails(state)
    assert (sent["sender/recipient"], sent["subject"]) == (
        "kofi.mensah@atlas.com",
        "RE: Task Update on Create wireframe for homepage",
    )


def test_deleting_a_missing_email_is_refused(state):
    assert delete_email(state, "00000259") == "Email deleted successfully."
    with pytest.raises(ToolError, match="Email not found."):
        delete_email(state, "00000259")
