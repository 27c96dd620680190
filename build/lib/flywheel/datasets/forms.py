"""Forms of the datasets app: task filters and the task editor (content as JSON, validated by the service).

JSON fields are read with `flywheel.core.jsonbody.json_parse`: invalid, too deep, NaN or unstorable
text is a form error that names the field, never a 500.
"""

from __future__ import annotations

from typing import Any

from django import forms

from flywheel.core.jsonbody import json_parse
from flywheel.core.models import Agent
from flywheel.datasets.models import Environment, PairSource, SourceKind, Split
from flywheel.datasets.selectors import PairFilters, TaskFilters
from trainer.contracts import ContractError, EpisodeSetup, Task
from trainer.spec.synthetic import DEFAULT_THRESHOLD, HELDOUT_THRESHOLD, METHODS
from trainer.verifiers import DEFAULT_VERIFIER, verifier_names


def _choices(options: Any) -> list[tuple[str, str]]:
    return [("", "any"), *options.choices]


class TaskFilterForm(forms.Form):
    split = forms.ChoiceField(required=False, choices=_choices(Split))
    bucket = forms.SlugField(required=False)
    source_kind = forms.ChoiceField(required=False, choices=_choices(SourceKind), label="Source")
    environment = forms.ChoiceField(required=False, choices=_choices(Environment))
    agent = forms.CharField(required=False, max_length=100)
    q = forms.CharField(required=False, max_length=200, label="Text")

    def filters(self) -> TaskFilters:
        data = self.cleaned_data if self.is_valid() else {}
        return TaskFilters(
            split=data.get("split", ""), bucket=data.get("bucket", ""), source_kind=data.get("source_kind", ""),
            environment=data.get("environment", ""), agent=data.get("agent", ""), text=data.get("q", "").strip(),
        )  # fmt: skip


class TaskEditForm(forms.Form):
    split = forms.ChoiceField(choices=Split.choices)
    messages = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "class": "code"}), help_text="OpenAI chat messages."
    )
    expected_calls = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "class": "code"}),
        help_text='[{"name": ..., "arguments": {"arg": [accepted values...]}}]; "" among values: may be omitted.',
    )
    no_call_expected = forms.BooleanField(required=False)
    order_sensitive = forms.BooleanField(required=False)
    note = forms.CharField(required=False, max_length=500, help_text="Why this change.")

    def __init__(self, *args: Any, base: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base = base

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            content = {
                **self.base,
                "messages": json_parse(data.get("messages") or "null", what="messages"),
                "expected_calls": json_parse(data.get("expected_calls") or "null", what="expected_calls"),
                "no_call_expected": data.get("no_call_expected", False),
                "order_sensitive": data.get("order_sensitive", False),
            }
            data["task"] = Task.from_json(content)
        except ValueError as exc:  # JsonInputError (invalid, too deep, NaN...) and ContractError alike
            raise forms.ValidationError(str(exc)) from exc
        except (ContractError, TypeError, AttributeError) as exc:
            raise forms.ValidationError(f"not a valid task: {exc}") from exc
        return data


class TaskWriteForm(forms.Form):
    """A new task, written from scratch or prefilled from a trajectory; the service validates the rules.

    `episode`, given for a task converted into an episode, is added to the task as drafted: it is
    the trajectory's own recording, so it comes from the trajectory, not from the form's fields.
    """

    external_id = forms.CharField(max_length=255, label="Task id")
    split = forms.ChoiceField(choices=Split.choices, initial=Split.HELDOUT)
    bucket: forms.ModelChoiceField = forms.ModelChoiceField(queryset=None, required=False)
    messages = forms.CharField(widget=forms.Textarea(attrs={"rows": 10}), help_text="OpenAI chat messages.")
    tools = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}), help_text="OpenAI tools (JSON Schema).")
    expected_calls = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 8}),
        help_text='[{"name": ..., "arguments": {"arg": [accepted values...]}}]; "" among values: may be omitted.',
    )
    no_call_expected = forms.BooleanField(required=False)
    order_sensitive = forms.BooleanField(required=False)

    def __init__(self, *args: Any, episode: EpisodeSetup | None = None, **kwargs: Any) -> None:
        from flywheel.triage.models import Bucket

        super().__init__(*args, **kwargs)
        self.fields["bucket"].queryset = Bucket.objects.all()  # type: ignore[attr-defined]
        self.episode = episode

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            content = {
                "id": data.get("external_id", ""),
                "messages": json_parse(data.get("messages") or "null", what="messages"),
                "tools": json_parse(data.get("tools") or "[]", what="tools"),
                "expected_calls": json_parse(data.get("expected_calls") or "[]", what="expected_calls"),
                "no_call_expected": data.get("no_call_expected", False),
                "order_sensitive": data.get("order_sensitive", False),
                "episode": self.episode.to_json() if self.episode is not None else None,
            }
            data["task"] = Task.from_json(content)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        except (ContractError, TypeError, AttributeError, KeyError) as exc:
            raise forms.ValidationError(f"not a valid task: {exc}") from exc
        return data


class SnapshotForm(forms.Form):
    """Freeze a split (of one agent, or all) as a snapshot: all its tasks, or a stratified seeded sample."""

    name = forms.CharField(max_length=200)
    split = forms.ChoiceField(choices=Split.choices, initial=Split.HELDOUT)
    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"), required=False, empty_label="every agent")
    sample_size = forms.IntegerField(
        min_value=1, required=False, label="Sample", help_text="Empty: every task of the split."
    )
    stratify_by = forms.ChoiceField(
        choices=[("category", "category"), ("bucket_id", "failure bucket")], initial="category", label="Stratify by"
    )
    seed = forms.IntegerField(initial=0, min_value=0)


class PairFilterForm(forms.Form):
    agent = forms.CharField(required=False, max_length=100)
    split = forms.ChoiceField(choices=_choices(Split), required=False)
    source = forms.ChoiceField(choices=_choices(PairSource), required=False)

    def filters(self) -> PairFilters:
        if not self.is_valid():
            return PairFilters()
        return PairFilters(**self.cleaned_data)


class PairSnapshotForm(forms.Form):
    """Freeze one agent's preference pairs of a split: what a dpo job trains (or is checked) on."""

    name = forms.CharField(max_length=200)
    split = forms.ChoiceField(choices=Split.choices, initial=Split.TRAIN)
    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The pairs page also holds the filter form, whose split and agent would otherwise share these ids:
        # a label would then name the filter's field, not this one.
        kwargs.setdefault("auto_id", "pair_snapshot_%s")
        super().__init__(*args, **kwargs)


class SyntheticBatchForm(forms.Form):
    """Generate variants of one agent's train tasks, screened by the verifier, its environment and duplicates."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"))
    methods = forms.MultipleChoiceField(
        choices=[(method, method) for method in METHODS], initial=list(METHODS), widget=forms.CheckboxSelectMultiple
    )
    per_method = forms.IntegerField(initial=2, min_value=1, max_value=10, label="Most per method and seed")
    seed = forms.IntegerField(initial=0, min_value=0)
    verifier = forms.ChoiceField(choices=[(name, name) for name in verifier_names()], initial=DEFAULT_VERIFIER)
    threshold = forms.FloatField(
        initial=DEFAULT_THRESHOLD, min_value=0.05, max_value=1.0,
        help_text="Similarity at which two variants are near-duplicates.",
    )  # fmt: skip
    heldout_threshold = forms.FloatField(
        initial=HELDOUT_THRESHOLD, min_value=0.05, max_value=1.0,
        help_text="Similarity to a held-out task at which a variant is dropped.",
    )  # fmt: skip
