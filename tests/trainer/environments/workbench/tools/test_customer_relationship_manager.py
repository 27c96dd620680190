"""The customer relationship manager tools, on WorkBench's customers."""

from __future__ import annotations

import pytest

from trainer.environments.workbench.tools import ToolError
from trainer.environments.workbench.tools.customer_relationship_manager import (
    add_customer,
    delete_customer,
    search_customers,
    update_customer,
)


def test_a_search_finds_by_name_with_empty_cells_as_null_and_pages(state):
    found = search_customers(state, customer_name="casey wilson", page=1, page_size=1)
    [customer] = found["customers"]
    assert customer["customer_id"] == "00000014" and customer["customer_phone"] is None
    assert found["pagination"] == {"total_customers": 1, "page": 1, "page_size": 1, "total_pages": 1}


def test_a_search_applies_every_filter_and_inclusive_date_bounds(state):
    found = search_customers(
        state, status="Proposal", product_interest="software", last_contact_date_max="2023-11-09", page_size=100
    )
    customers = found["customers"]
    assert customers and all(c["status"] == "Proposal" and c["product_interest"] == "Software" for c in customers)
    assert all(c["last_contact_date"] <= "2023-11-09" for c in customers)
    assert (
        search_customers(state, product_interest="Consulting", status="Proposal", last_contact_date_max="2023-11-09")
        == "No customers found."
    )


def test_a_search_without_filters_is_refused(state):
    with pytest.raises(ToolError, match="No search parameters provided"):
        search_customers(state, page=2)


def test_adding_a_customer_gives_the_next_id_and_lower_cases_addresses(state):
    assert add_customer(state, "Dakota Thomas", "Nadia.Moreau@atlas.com", "Lead") == "00000200"
    added = state.customers.get("00000200")
    assert (added["assigned_to_email"], added["status"], added["customer_phone"]) == (
        "nadia.moreau@atlas.com",
        "Lead",
        None,
    )
    with pytest.raises(ToolError, match="required fields"):
        add_customer(state, "Dakota Thomas", "nadia.moreau@atlas.com")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("status", "lost", "Status not valid"),
        ("product_interest", "Food", "Product interest not valid"),
        ("customer_id", "00000001", "Field not valid"),
    ],
)
def test_an_update_to_an_unknown_value_or_field_is_refused(state, field, value, message):
    with pytest.raises(ToolError, match=message):
        update_customer(state, "00000014", field, value)
    assert state.customers.get("00000014") is state.customers.rows["00000014"]


def test_updating_and_deleting_a_customer(state):
    assert update_customer(state, "00000014", "status", "Won") == "Customer updated successfully."
    assert state.customers.get("00000014")["status"] == "Won"
    assert delete_customer(state, "00000014") == "Customer deleted successfully."
    with pytest.raises(ToolError, match="Customer not found."):
        update_customer(state, "00000014", "status", "Won")
