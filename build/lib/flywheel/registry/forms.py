"""Forms of the registry pages: promote, roll back, launch a gate or a replay, edit an agent's gate policy."""

from __future__ import annotations

from typing import Any

from django import forms

from flywheel.core.forms import JSONObjectField
from flywheel.datasets.models import Split, TaskSetSnapshot
from flywheel.registry.models import ModelVersion
from trainer.spec.config import config_help
from trainer.spec.gate import LATENCY_SIGNALS, METRICS, TESTS, Policy

NO_VERSION = "none"
# No regression_sample_size: a gate checks every regression task unless told to sample them.
DEFAULT_GATE_OPTIONS = {"device": "cpu", "batch_size": 8, "max_new_tokens": 96, "heldout_sample_size": 50}
DEFAULT_REPLAY_OPTIONS = {"max_new_tokens": 256}


class ExpectedLiveField(forms.CharField):
    """The live version the page showed (its id, or "none"), so a stale page cannot change the pointer."""

    widget = forms.HiddenInput

    def to_python(self, value: Any) -> str:
        return str(value or NO_VERSION)


def expected_live_value(version: ModelVersion | None) -> str:
    return str(version.pk) if version else NO_VERSION


def expected_live_version(value: str) -> ModelVersion | None | str:
    """The version the page showed: None for none, or the raw value when it names no version (always stale)."""
    if value == NO_VERSION:
        return None
    return ModelVersion.objects.filter(pk=value).first() if len(value) == 36 else value


class PromoteForm(forms.Form):
    reason = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Required when the gate did not pass against the live version: why promote anyway.",
    )  # fmt: skip
    expected_live = ExpectedLiveField()


class RollbackForm(forms.Form):
    to_version: forms.ModelChoiceField = forms.ModelChoiceField(queryset=ModelVersion.objects.none(),
                                                                empty_label=None)  # fmt: skip
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), help_text="Why roll back (required).")
    expected_live = ExpectedLiveField()

    def __init__(self, *args: Any, choices: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if choices is not None:
            self.fields["to_version"].queryset = choices  # type: ignore[attr-defined]


class GateLaunchForm(forms.Form):
    heldout_snapshot: forms.ModelChoiceField = forms.ModelChoiceField(
        queryset=TaskSetSnapshot.objects.filter(split=Split.HELDOUT), help_text="The held-out tasks to compare on."
    )
    regression_snapshot: forms.ModelChoiceField = forms.ModelChoiceField(
        queryset=TaskSetSnapshot.objects.all(), required=False,
        help_text="Regression tasks that must not break (optional).",
    )  # fmt: skip
    options = JSONObjectField(
        widget=forms.Textarea(attrs={"rows": 4}), initial=DEFAULT_GATE_OPTIONS, required=False,
        example='{"device": "cpu"}',
        help_text="Evaluation settings of trainer.spec.gate.GateConfig (device, batch_size, sample sizes ...).",
    )  # fmt: skip


class GatePolicyForm(forms.Form):
    """One field per knob of `trainer.gate.Policy`; the service checks the values with Policy itself."""

    metric = forms.ChoiceField(choices=[(name, name) for name in METRICS])
    test = forms.ChoiceField(choices=[(name, name) for name in TESTS])
    alpha = forms.FloatField(min_value=0.0001, max_value=0.5)
    max_heldout_broken_share = forms.FloatField(min_value=0, max_value=1)
    min_bucket_tasks = forms.IntegerField(min_value=1)
    max_bucket_drop = forms.FloatField(min_value=0, max_value=1)
    max_unsafe_increase = forms.FloatField(min_value=0)
    max_new_unsafe_tasks = forms.IntegerField(min_value=0)
    max_latency_increase = forms.FloatField(min_value=0)
    latency_signal = forms.ChoiceField(choices=[(name, name) for name in LATENCY_SIGNALS])
    max_tokens_per_task = forms.FloatField(min_value=0, required=False)
    max_tokens_increase = forms.FloatField(min_value=0, required=False)
    max_regression_failures = forms.IntegerField(min_value=0)
    bootstrap_resamples = forms.IntegerField(min_value=100, max_value=100_000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, text in config_help(Policy).items():
            if name in self.fields:
                self.fields[name].help_text = text

    @classmethod
    def for_policy(cls, policy: Policy, data: Any = None) -> GatePolicyForm:
        return cls(data, initial=policy.to_json())


class VersionChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.tag} · {obj.base_model}"


class ReplayForm(forms.Form):
    """Which version answers the failing step again (and, optionally, another step and generation settings)."""

    version = VersionChoiceField(queryset=ModelVersion.objects.none(), empty_label=None)
    step = forms.IntegerField(
        min_value=0, required=False, help_text="Empty: the failing step (as a task drafted from the trajectory)."
    )
    options = JSONObjectField(
        widget=forms.Textarea(attrs={"rows": 3}), initial=DEFAULT_REPLAY_OPTIONS, required=False,
        example='{"device": "cpu"}', help_text="Generation settings of trainer.spec.replay.ReplayConfig.",
    )  # fmt: skip

    def __init__(self, *args: Any, versions: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["version"].queryset = versions  # type: ignore[attr-defined]
