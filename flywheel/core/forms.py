"""Forms and form fields shared by the apps."""

from __future__ import annotations

import json
from typing import Any

from django import forms


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “support-bot ingest”.")


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
            parsed = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise forms.ValidationError(f"a JSON object, such as {self.example}")
        return parsed

    def prepare_value(self, value: Any) -> Any:
        return json.dumps(value, indent=2) if isinstance(value, dict) else value
