"""Forms of the training app: the launch form with per-kind defaults, the sample filter, the compare picker.

Forms parse and check input only; `services.job_launch` checks the hyperparameters against the
trainer's own config classes, so the defaults here are a starting point, not the rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlencode

from django import forms
from django.urls import reverse

from flywheel.core.forms import JSONObjectField
from flywheel.core.models import Agent
from flywheel.datasets.models import Split, TaskSetSnapshot
from flywheel.training.models import CASE_KINDS, Job, JobKind

DEFAULT_HYPERPARAMETERS: dict[str, dict[str, Any]] = {
    JobKind.EVAL: {"verifier": "tool_call", "backend": "transformers", "device": "cpu", "batch_size": 8,
                   "max_new_tokens": 96},
    # Length limits left null: the trainer derives them from the train tasks and refuses limits that cut answers.
    JobKind.SFT: {"num_train_epochs": 2, "learning_rate": 2e-4, "lora_r": 16, "lora_alpha": 32,
                  "lora_target_modules": "all-linear", "max_length": None, "per_device_train_batch_size": 4,
                  "eval_interval": 0},
    JobKind.DPO: {"beta": 0.1, "loss_type": "sigmoid", "num_train_epochs": 3, "learning_rate": 5e-5, "lora_r": 16,
                  "lora_alpha": 32, "lora_target_modules": "all-linear", "max_length": None,
                  "per_device_train_batch_size": 4, "eval_interval": 0},
    JobKind.GRPO: {"num_generations": 8, "loss_type": "dapo", "beta": 0.0, "learning_rate": 1e-5, "max_steps": 40,
                   "max_completion_length": None, "dynamic_sampling_redraws": 4, "lora_r": 16, "lora_alpha": 32,
                   "lora_target_modules": "all-linear", "eval_interval": 10, "verifier": "tool_call",
                   "environment": None, "reward": "verifier", "judge_mode": "single"},
    JobKind.GATE: {"metric": "correct_arguments", "test": "bootstrap", "alpha": 0.05, "heldout_sample_size": 50,
                   "regression_sample_size": None, "verifier": "tool_call", "backend": "transformers",
                   "device": "auto", "batch_size": 8, "max_new_tokens": 96},
    # Keeps the train tasks solved 1 to 7 times of 8: GRPO groups on them do not tie.
    JobKind.MINE: {"samples": 8, "min_solved": 1, "max_solved": None, "temperature": 1.0, "max_new_tokens": 256,
                   "verifier": "tool_call", "environment": None, "backend": "transformers", "device": "auto",
                   "batch_size": 4, "sample_size": None},
    JobKind.SYNTH: {"paraphrases": 2, "temperature": 0.8, "max_new_tokens": 96, "verifier": "tool_call",
                    "threshold": 0.8, "heldout_threshold": 0.6, "backend": "transformers", "device": "auto",
                    "batch_size": 8},
}  # fmt: skip
# The kinds that train, and so take a held-out snapshot to evaluate on as they go.
HELDOUT_KINDS = (JobKind.SFT, JobKind.DPO, JobKind.GRPO)
PREFILL_FIELDS = ("kind", "snapshot", "heldout_snapshot", "base_model", "adapter", "agent")
SNAPSHOT_KIND_CHOICES = [(value, label) for value, label in JobKind.choices if value not in CASE_KINDS]


def defaults_json(kind: str) -> str:
    """The default hyperparameters of `kind` as the form shows them."""
    return json.dumps(DEFAULT_HYPERPARAMETERS.get(kind, {}), indent=2)


class SnapshotChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.name} · {obj.split} · {obj.task_count} tasks · {obj.content_hash[:12]}"


class JobLaunchForm(forms.Form):
    # Every kind that runs on a snapshot is offered (a replay is launched from its trajectory's page);
    # job_launch says which ones can run today, as a form error.
    kind = forms.ChoiceField(choices=SNAPSHOT_KIND_CHOICES, initial=JobKind.EVAL)
    snapshot = SnapshotChoiceField(
        queryset=TaskSetSnapshot.objects.all(),
        help_text="Trained on (sft, grpo: a train snapshot; dpo: a train snapshot of preference pairs), evaluated "
                  "(eval), mined for hard tasks (mine: a train snapshot) or varied (synth: a train snapshot).",
    )
    heldout_snapshot = SnapshotChoiceField(
        queryset=TaskSetSnapshot.objects.filter(split=Split.HELDOUT), required=False, label="Held-out snapshot",
        help_text="Optional, sft, dpo and grpo: evaluated every eval_interval steps, never trained on.",
    )  # fmt: skip
    base_model = forms.CharField(
        max_length=500, initial="demo", help_text="'demo' (SmolLM2-135M-Instruct), a folder or a .gguf"
    )
    adapter = forms.CharField(
        max_length=500, required=False, label="Parent adapter",
        help_text="A PEFT adapter folder: evaluated with the base (eval), or trained further (sft, dpo, grpo).",
    )  # fmt: skip
    agent = forms.ModelChoiceField(
        queryset=Agent.objects.all(), required=False, help_text="Empty: the snapshot's agent."
    )
    hyperparameters = JSONObjectField(
        widget=forms.Textarea(attrs={"rows": 14, "class": "code"}), required=False, example='{"batch_size": 8}'
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kind = self.initial.get("kind") or JobKind.EVAL
        self.fields["hyperparameters"].initial = defaults_json(kind)

    def launch_arguments(self) -> dict[str, Any]:
        """The cleaned data as `job_launch`'s keyword arguments (without the actor)."""
        data = self.cleaned_data
        return {
            "kind": data["kind"], "snapshot": data["snapshot"], "base_model": data["base_model"],
            "adapter": data["adapter"], "agent": data["agent"] or data["snapshot"].agent,
            "hyperparameters": data["hyperparameters"], "heldout_snapshot": data["heldout_snapshot"],
        }  # fmt: skip


def launch_url(fields: Mapping[str, object]) -> str:
    """The launch form's address, pre-filled with `fields` (PREFILL_FIELDS; empty values left out)."""
    query = urlencode({name: str(value) for name, value in fields.items() if value not in (None, "")})
    return f"{reverse('training:job_new')}?{query}"


def launch_initial(query: Mapping[str, str]) -> dict[str, str]:
    """Initial values from GET parameters (the recommendation's button links here); unknown kinds are dropped."""
    initial = {name: query[name] for name in PREFILL_FIELDS if query.get(name)}
    if initial.get("kind") not in dict(SNAPSHOT_KIND_CHOICES):
        initial.pop("kind", None)
    return initial


class PromptChangeForm(forms.Form):
    """A prompt change to evaluate on the baseline's snapshot: a system-prompt preamble and tool descriptions.

    `current` is each tool's description as the baseline's prompt showed it; only the descriptions
    that differ from it become overrides (`tool_descriptions` of `trainer.spec.eval.EvalConfig`).
    """

    system_preamble = forms.CharField(
        required=False, strip=False, label="System prompt preamble", widget=forms.Textarea(attrs={"rows": 8}),
        help_text="Put before each task's own system prompt; the tools and the call format follow as usual.",
    )  # fmt: skip
    tool_descriptions = JSONObjectField(
        required=False, label="Tool descriptions", widget=forms.Textarea(attrs={"rows": 10, "class": "code"}),
        example='{"lookup_order": "Find an order by its id before any refund."}',
        help_text="Tool name to the description the prompt shows; edit the ones to change.",
    )  # fmt: skip

    def __init__(self, *args: Any, current: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.current = dict(current)

    def clean_tool_descriptions(self) -> dict[str, str]:
        descriptions = self.cleaned_data["tool_descriptions"]
        unknown = sorted(set(descriptions) - set(self.current))
        if unknown:
            raise forms.ValidationError(f"no such tool in the snapshot's tasks: {', '.join(unknown)}")
        if not all(isinstance(text, str) for text in descriptions.values()):
            raise forms.ValidationError("each description is a string")
        return {name: text for name, text in descriptions.items() if text != self.current[name]}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not (data.get("system_preamble") or "").strip() and not data.get("tool_descriptions") and not self.errors:
            raise forms.ValidationError("nothing is changed: write a preamble or edit a tool's description")
        return data

    def prompt_settings(self) -> dict[str, Any]:
        """The eval hyperparameters that carry the change."""
        data = self.cleaned_data
        return {"system_preamble": data["system_preamble"].strip(), "tool_descriptions": data["tool_descriptions"]}


class SampleFilterForm(forms.Form):
    """Which checkpoint samples to show: a step, a reward range, and one component's range."""

    step = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)
    min_reward = forms.FloatField(required=False, label="Reward ≥")
    max_reward = forms.FloatField(required=False, label="Reward ≤")
    component = forms.ChoiceField(required=False)
    component_min = forms.FloatField(required=False, label="Component ≥")
    component_max = forms.FloatField(required=False, label="Component ≤")

    def __init__(self, data: Mapping[str, Any], *, steps: list[int], components: list[str]) -> None:
        super().__init__(data)
        cast(forms.ChoiceField, self.fields["step"]).choices = [("", "all"), *((str(s), str(s)) for s in steps)]
        cast(forms.ChoiceField, self.fields["component"]).choices = [("", "any"), *((n, n) for n in components)]

    def filters(self) -> dict[str, Any]:
        """The valid filters as `selectors.job_samples` keyword arguments; an invalid one is left out."""
        if not self.is_bound:
            return {}
        self.is_valid()
        values = {name: self.cleaned_data.get(name) for name in self.fields if name not in self.errors}
        return {name: value for name, value in values.items() if value not in (None, "")}


class JobCompareForm(forms.Form):
    job = forms.ModelMultipleChoiceField(
        queryset=Job.objects.select_related("agent", "snapshot", "launched_by"), required=False
    )
    metric = forms.CharField(max_length=100, required=False)
