"""The launch form: per-kind defaults, parsed into the service's arguments."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from flywheel.datasets.models import TaskSetSnapshot
from flywheel.training.models import JobKind
from flywheel.training.services import RUNNABLE_KINDS

DEFAULT_HYPERPARAMETERS: dict[str, dict[str, Any]] = {
    JobKind.EVAL: {"verifier": "tool_call", "backend": "transformers", "device": "cpu", "batch_size": 8,
                   "max_new_tokens": 96},
}  # fmt: skip


class JobLaunchForm(forms.Form):
    kind = forms.ChoiceField(choices=[(kind, JobKind(kind).label) for kind in RUNNABLE_KINDS])
    snapshot: forms.ModelChoiceField = forms.ModelChoiceField(queryset=TaskSetSnapshot.objects.all())
    base_model = forms.CharField(
        max_length=500, initial="demo", help_text="'demo' (SmolLM2-135M-Instruct), a folder or a .gguf"
    )
    adapter = forms.CharField(max_length=500, required=False, help_text="A registered adapter folder to evaluate.")
    hyperparameters = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6}), initial=json.dumps(DEFAULT_HYPERPARAMETERS[JobKind.EVAL], indent=2)
    )

    def clean_hyperparameters(self) -> dict[str, Any]:
        try:
            value = json.loads(self.cleaned_data["hyperparameters"] or "{}")
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError('a JSON object, such as {"batch_size": 8}')
        return value
