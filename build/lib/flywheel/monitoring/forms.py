"""Forms of the monitoring app: a scoring rule's fields, and the reason a rollback from an alert needs."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from flywheel.core.models import Agent
from flywheel.ingest.models import Outcome, Trajectory
from flywheel.monitoring.models import Scorer, ScoringRule
from flywheel.monitoring.services import RuleFields
from flywheel.triage.models import Bucket


class ScoringRuleForm(forms.Form):
    """A rule: its filter (empty fields match anything), its sample rate and scorers."""

    name = forms.CharField(max_length=100)
    model_version = forms.CharField(max_length=100, required=False, label="Model version",
                                    widget=forms.TextInput(attrs={"list": "version-tags"}),
                                    help_text="A version tag such as support-bot:v3; empty: any.")  # fmt: skip
    outcome = forms.ChoiceField(required=False, choices=[("", "any"), *Outcome.choices])
    tool = forms.CharField(max_length=200, required=False, widget=forms.TextInput(attrs={"list": "tool-names"}),
                           help_text="Trajectories that call this tool; empty: any.")  # fmt: skip
    bucket = forms.ChoiceField(required=False, help_text="Trajectories in this bucket (assigned or suggested).")
    sample_rate = forms.FloatField(min_value=0.0, max_value=1.0, initial=1.0, label="Sample rate",
                                   help_text="The share of matching trajectories scored, 0 to 1.")  # fmt: skip
    # The judge is not ticked for a new rule: it runs a model on the gpu queue for every sampled trajectory.
    scorers = forms.MultipleChoiceField(choices=Scorer.choices, widget=forms.CheckboxSelectMultiple,
                                        initial=[Scorer.SAFETY, Scorer.SCHEMA, Scorer.CATALOGUE])  # fmt: skip
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, agent: Agent, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["bucket"]).choices = [
            ("", "any"),
            *Bucket.objects.values_list("slug", "name"),
        ]
        tags = Trajectory.objects.filter(agent=agent).exclude(model_version="").order_by().values_list(
            "model_version", flat=True).distinct()  # fmt: skip
        self.version_tags = sorted(tags[:200])  # offered in a datalist, not enforced
        self.tool_names = agent.tool_names()

    def rule_fields(self) -> RuleFields:
        data = self.cleaned_data
        return RuleFields(name=data["name"], model_version=data["model_version"].strip(), outcome=data["outcome"],
                          tool=data["tool"].strip(), bucket=data["bucket"], sample_rate=data["sample_rate"],
                          scorers=tuple(data["scorers"]), enabled=data["enabled"])  # fmt: skip

    @staticmethod
    def initial_for(rule: ScoringRule) -> dict[str, Any]:
        return {name: getattr(rule, name) for name in ("name", "model_version", "outcome", "tool", "bucket",
                                                       "sample_rate", "scorers", "enabled")}  # fmt: skip


class AlertRollbackForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), help_text="Why roll back (required).")
