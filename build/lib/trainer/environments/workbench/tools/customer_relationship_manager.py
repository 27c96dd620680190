"""The customer relationship manager tools: search, update, add and delete customers.

Behaviour follows NeMo Gym's workplace assistant: a search needs at least one filter, matches
text filters as case-insensitive substrings and date bounds as inclusive text comparisons,
keeps the table's order and pages five at a time. Status and product interest must be one of
the known values (their case matters); addresses are stored lower-cased.
"""

from __future__ import annotations

from typing import Any

from trainer.environments.workbench.state import WorkbenchState
from trainer.environments.workbench.tools.common import DEFAULT_PAGE_SIZE, Tool, ToolError, contains, one_of, paginate

STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCT_INTERESTS = ("Software", "Hardware", "Services", "Consulting", "Training")
UPDATABLE_FIELDS = (
    "customer_name",
    "assigned_to_email",
    "customer_email",
    "customer_phone",
    "last_contact_date",
    "product_interest",
    "status",
    "notes",
    "follow_up_by",
)
_LOWER_CASED = ("customer_email", "assigned_to_email")
# Each date filter: the column it bounds, and whether it is the lower bound.
_DATE_FILTERS = {
    "last_contact_date_min": ("last_contact_date", True),
    "last_contact_date_max": ("last_contact_date", False),
    "follow_up_by_min": ("follow_up_by", True),
    "follow_up_by_max": ("follow_up_by", False),
}


def search_customers(
    state: WorkbenchState,
    customer_name: str | None = None,
    customer_email: str | None = None,
    product_interest: str | None = None,
    status: str | None = None,
    assigned_to_email: str | None = None,
    last_contact_date_min: str | None = None,
    last_contact_date_max: str | None = None,
    follow_up_by_min: str | None = None,
    follow_up_by_max: str | None = None,
    page: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Any:
    texts = {
        "customer_name": customer_name,
        "customer_email": customer_email,
        "product_interest": product_interest,
        "status": status,
        "assigned_to_email": assigned_to_email,
    }
    dates = {
        "last_contact_date_min": last_contact_date_min,
        "last_contact_date_max": last_contact_date_max,
        "follow_up_by_min": follow_up_by_min,
        "follow_up_by_max": follow_up_by_max,
    }
    if not any(texts.values()) and not any(dates.values()):
        raise ToolError("No search parameters provided. Please provide at least one parameter.")
    found = [
        customer
        for customer in state.customers.values()
        if all(contains(customer[column], value) for column, value in texts.items() if value)
        and all(
            _within(customer[_DATE_FILTERS[name][0]], bound, _DATE_FILTERS[name][1])
            for name, bound in dates.items()
            if bound
        )
    ]
    if not found:
        return "No customers found."
    return paginate(found, "customers", page, page_size)


def update_customer(
    state: WorkbenchState, customer_id: str | None = None, field: str | None = None, new_value: str | None = None
) -> Any:
    if not customer_id or not field or not new_value:
        raise ToolError("Customer ID, field, or new value not provided.")
    if field == "status":
        one_of(new_value, STATUSES, "Status not valid.")
    if field == "product_interest":
        one_of(new_value, PRODUCT_INTERESTS, "Product interest not valid.")
    if state.customers.get(customer_id) is None:
        raise ToolError("Customer not found.")
    one_of(field, UPDATABLE_FIELDS, "Field not valid.")
    state.customers.update(customer_id, field, new_value.lower() if field in _LOWER_CASED else new_value)
    return "Customer updated successfully."


def add_customer(
    state: WorkbenchState,
    customer_name: str | None = None,
    assigned_to_email: str | None = None,
    status: str | None = None,
    customer_email: str | None = None,
    customer_phone: str | None = None,
    last_contact_date: str | None = None,
    product_interest: str | None = None,
    notes: str = "",
    follow_up_by: str | None = None,
) -> Any:
    if not customer_name or not assigned_to_email or not status:
        raise ToolError("Please provide all required fields: customer_name, assigned_to_email, status.")
    return state.customers.insert(
        {
            "customer_name": customer_name,
            "assigned_to_email": assigned_to_email.lower(),
            "status": status,
            "customer_email": customer_email.lower() if customer_email else customer_email,
            "customer_phone": customer_phone,
            "last_contact_date": last_contact_date,
            "product_interest": product_interest,
            "notes": notes,
            "follow_up_by": follow_up_by,
        }
    )


def delete_customer(state: WorkbenchState, customer_id: str | None = None) -> Any:
    if not customer_id:
        raise ToolError("Customer ID not provided.")
    if state.customers.get(customer_id) is None:
        raise ToolError("Customer not found.")
    state.customers.delete(customer_id)
    return "Customer deleted successfully."


def _within(value: str | None, bound: str, lower: bool) -> bool:
    # An empty date never satisfies a bound, as a missing value fails pandas' comparison.
    if value is None:
        return False
    return value >= bound if lower else value <= bound


TOOLS: dict[str, Tool] = {
    "customer_relationship_manager_search_customers": search_customers,
    "customer_relationship_manager_update_customer": update_customer,
    "customer_relationship_manager_add_customer": add_customer,
    "customer_relationship_manager_delete_customer": delete_customer,
}
