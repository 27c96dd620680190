"""Forms of the rewards app: a new profiling run, a re-verify, a mark. They parse; services decide."""

from __future__ import annotations

from typing import Any

from django import forms

from flywheel.core.forms import JSONObjectField
from flywheel.datasets.models import TaskSetSnapshot
from flywheel.rewards.models import MarkVerdict, OutputSource
from flywheel.rewards.services import SAMPLE_MAX, SAMPLE_MIN, Scoring
from flywheel.training.models import EvalRun
from trainer.environments import environment_names
from trainer.verifiers import DEFAULT_VERIFIER, verifier_names

MAX_OUTPUTS_BYTES = 64 << 20
DEFAULT_SAMPLE = 100


def _environment_choices() -> list[tuple[str, str]]:
    return [("", "none: score with the verifier alone"), *((name, name) for name in environment_names())]


class ScoringForm(forms.Form):
    """The fields a run scores with; the policy starts from the snapshot agent's policy."""

    verifier = forms.ChoiceField(choices=[(name, name) for name in verifier_names()], initial=DEFAULT_VERIFIER)
    environment = forms.ChoiceField(
        choices=_environment_choices, required=False,
        help_text="single_step scores each output with the verifier; workbench runs its calls in the sandbox.",
    )  # fmt: skip
    policy = JSONObjectField(
        example='{"name": "strict", "denied_tools": ["delete_account"]}',
        widget=forms.Textarea(attrs={"rows": 12, "class": "code", "spellcheck": "false"}),
        help_text="trainer's SafetyPolicy JSON (docs/verifiers.md): denied_tools, argument_patterns, filter_rules, "
        "recipient_rules, confirmation_rules.",
    )
    note = forms.CharField(max_length=500, required=False, help_text="Why this run: what it checks.")

    def scoring(self) -> Scoring:
        data = self.cleaned_data
        return Scoring(verifier=data["verifier"], policy=data["policy"], environment=data["environment"] or "")


class ProfileRunForm(ScoringForm):
    snapshot: forms.ModelChoiceField = forms.ModelChoiceField(queryset=TaskSetSnapshot.objects.all())
    source_kind = forms.ChoiceField(
        label="Outputs", choices=OutputSource.choices, initial=OutputSource.UPLOAD, widget=forms.RadioSelect
    )
    outputs = forms.FileField(
        required=False, label="Outputs file",
        help_text='JSONL, one {"id": task id, "output": text or {"tool_calls": [...]}} a line, as '
        "python -m trainer verify reads it.",
    )  # fmt: skip
    evaluation = forms.ModelChoiceField(
        queryset=EvalRun.objects.select_related("job", "snapshot").order_by("-created_at"), required=False,
        label="Evaluation", help_text="A finished evaluation job: its model's answer to each task it ran.",
    )  # fmt: skip
    sample_size = forms.IntegerField(
        min_value=SAMPLE_MIN, max_value=SAMPLE_MAX, initial=DEFAULT_SAMPLE,
        help_text="How many outputs to draw; profile 50 to 100 before training.",
    )  # fmt: skip
    seed = forms.IntegerField(initial=0, help_text="The same seed draws the same outputs from the same source.")

    field_order = [
        "snapshot", "source_kind", "outputs", "evaluation", "sample_size", "seed", "verifier", "environment", "policy",
    ]  # fmt: skip

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload = data.get("outputs")
        if data.get("source_kind") == OutputSource.UPLOAD:
            if not upload:
                self.add_error("outputs", "choose the outputs file to profile")
            elif upload.size > MAX_OUTPUTS_BYTES:
                self.add_error("outputs", f"the file is over {MAX_OUTPUTS_BYTES >> 20} MiB")
        if data.get("source_kind") == OutputSource.EVALUATION and not data.get("evaluation"):
            self.add_error("evaluation", "choose the evaluation whose answers to profile")
        return data


class MarkForm(forms.Form):
    verdict = forms.ChoiceField(choices=MarkVerdict.choices)
    note = forms.CharField(required=False, max_length=2000)
