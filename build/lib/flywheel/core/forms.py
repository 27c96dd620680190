"""Forms and form fields shared by the apps."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from flywheel.core.jsonbody import JsonInputError, json_parse
from flywheel.core.models import ApiToken

# How long a new token lives; the empty choice is a token that never expires.
TOKEN_LIFETIMES = [("30", "30 days"), ("90", "90 days"), ("365", "1 year"), ("", "never")]


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “support-bot ingest”.")
    scopes = forms.MultipleChoiceField(
        choices=ApiToken.Scope.choices,
        initial=ApiToken.Scope.values,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Pick at least one scope: what the token may do."},
    )
    expires_in_days = forms.TypedChoiceField(
        label="Expires",
        choices=TOKEN_LIFETIMES,
        coerce=int,
        empty_value=None,
        initial="90",
        required=False,
    )

    def expires_at(self) -> datetime | None:
        """When the token stops working, from the chosen lifetime; None: never."""
        days = self.cleaned_data["expires_in_days"]
        return timezone.now() + timedelta(days=days) if days else None


class JSONObjectField(forms.CharField):
    """A text area holding one JSON object; cleans to the dict, names the parse error otherwise.

    Empty text cleans to {} when the field is optional.
    """

    def __init__(self, *, example: str = "{}", **kwargs: Any) -> None:
        self.example = example
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, dict):
            return value
        text = super().to_python(value)
        if not text:
            return {}
        try:
            parsed = json_parse(text, what="the text")
        except JsonInputError as exc:  # invalid, too deep, NaN...: a form error, never a 500
            raise forms.ValidationError(exc.message) from exc
        if not isinstance(parsed, dict):
            raise forms.ValidationError(f"a JSON object, such as {self.example}")
        return parsed

    def prepare_value(self, value: Any) -> Any:
        return json.dumps(value, indent=2) if isinstance(value, dict) else value
