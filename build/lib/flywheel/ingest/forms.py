"""Forms of the ingest app: they parse input into the services' and selectors' types."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from flywheel.ingest.models import Outcome
from flywheel.ingest.parsers import FORMAT_CHOICES, FieldMapping
from flywheel.ingest.redaction import BUILT_IN, Redactor
from flywheel.ingest.selectors import FEEDBACK_ANY, TrajectoryFilters

MAPPING_HELP = "Where records keep their parts, e.g. messages=traj outcome=reward id=task_id,trial"


class UploadForm(forms.Form):
    file = forms.FileField(help_text="JSON Lines or a JSON array, optionally gzipped (.gz).")
    format = forms.ChoiceField(choices=[(name, name) for name in FORMAT_CHOICES], initial="auto")
    mapping = forms.CharField(required=False, help_text=MAPPING_HELP)
    agent = forms.SlugField(required=False, help_text="For records that name no agent.")
    source = forms.CharField(required=False, max_length=100, help_text="Namespace of record ids (default: the agent).")
    redact = forms.MultipleChoiceField(
        required=False,
        initial=lambda: settings.INGEST_REDACT_DEFAULT,
        choices=[(name, name.replace("_", " ")) for name in BUILT_IN],
        widget=forms.CheckboxSelectMultiple,
        help_text="Replaced by [REDACTED:…] before anything is stored.",
    )
    redact_custom = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Custom patterns",
        help_text="One regex a line, in RE2 syntax (no backreferences or lookaround).",
    )

    def clean_redact_custom(self) -> list[str]:
        patterns = [line.strip() for line in self.cleaned_data["redact_custom"].splitlines() if line.strip()]
        try:
            Redactor.build([], patterns)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return patterns

    def clean_mapping(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for item in self.cleaned_data["mapping"].split():
            key, sep, value = item.partition("=")
            if not sep or not key or not value:
                raise forms.ValidationError(f"{item!r} is not KEY=FIELD")
            pairs[key] = value
        try:
            FieldMapping.from_pairs(pairs)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return pairs


class TrajectoryFilterForm(forms.Form):
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *Outcome.choices])
    agent = forms.CharField(required=False, max_length=100)
    model_version = forms.CharField(required=False, max_length=100, label="Model version")
    tool = forms.CharField(required=False, max_length=200, label="Tool called")
    error = forms.NullBooleanField(
        required=False,
        label="Errors",
        widget=forms.Select(choices=[("unknown", "any"), ("true", "with errors"), ("false", "without")]),
    )
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    # The search rule is `selectors.text_match`'s.
    q = forms.CharField(
        required=False, max_length=200, label="Text",
        widget=forms.TextInput(attrs={"title": 'Whole words; "in quotes" or with punctuation: any part of the text'}),
    )  # fmt: skip
    feedback = forms.ChoiceField(
        required=False, label="Feedback",
        choices=[("", "—"), ("down", "thumbs down"), ("up", "thumbs up"), (FEEDBACK_ANY, "any")],
    )  # fmt: skip

    def filters(self) -> TrajectoryFilters:
        data: dict[str, Any] = self.cleaned_data if self.is_valid() else {}
        return TrajectoryFilters(
            outcome=data.get("outcome") or "",
            agent=(data.get("agent") or "").strip(),
            model_version=(data.get("model_version") or "").strip(),
            tool=(data.get("tool") or "").strip(),
            has_error=data.get("error"),
            since=data.get("since"),
            until=data.get("until"),
            text=(data.get("q") or "").strip(),
            feedback=data.get("feedback") or "",
        )
