"""Django admin for buckets (custom ones added by admins; built-in ones never deleted) and agents' safety policies
with their guardrails (what the served endpoint does per rule).

Every save and delete goes through `services`, so it is validated and audited like the pages'.
Reviews, suggestions and queues are worked on in the triage pages, not here.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from flywheel.core.access import AuthedRequest
from flywheel.triage import services
from flywheel.triage.guardrails import GuardrailSettings
from flywheel.triage.models import AgentPolicy, Bucket
from trainer.verifiers.safety import SafetyPolicy


@admin.register(Bucket)
class BucketAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "colour", "position", "built_in"]
    fields = ["name", "description", "colour", "position", "slug", "built_in"]
    readonly_fields = ["slug", "built_in"]
    ordering = ["position", "name"]

    def has_delete_permission(self, request: HttpRequest, obj: Bucket | None = None) -> bool:
        return super().has_delete_permission(request, obj) and not (obj and obj.built_in)

    def save_model(self, request: AuthedRequest, obj: Bucket, form: Any, change: bool) -> None:  # type: ignore[override]
        fields = {name: form.cleaned_data[name] for name in ("name", "description", "colour", "position")}
        if change:
            services.bucket_update(actor=request.user, bucket=obj, **fields)
        else:
            obj.pk = services.bucket_create(actor=request.user, **fields).pk

    def delete_model(self, request: AuthedRequest, obj: Bucket) -> None:  # type: ignore[override]
        try:
            services.bucket_delete(actor=request.user, bucket=obj)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))

    def delete_queryset(self, request: AuthedRequest, queryset: QuerySet[Bucket]) -> None:  # type: ignore[override]
        for bucket in queryset:
            self.delete_model(request, bucket)


def _or_empty(guardrails: Any) -> Any:
    """An empty guardrails box (None) is the default settings; anything else is checked as given."""
    return {} if guardrails is None else guardrails


class AgentPolicyForm(forms.ModelForm):
    policy = forms.JSONField(
        initial=lambda: SafetyPolicy.default().to_json(),
        widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "style": "font-family: monospace"}),
        help_text="trainer's SafetyPolicy JSON: denied_tools, argument_patterns, filter_rules, "
        "recipient_rules, confirmation_rules (see docs/verifiers.md). Starts from the default policy.",
    )

    guardrails = forms.JSONField(
        required=False,
        initial=lambda: GuardrailSettings().to_json(),
        widget=forms.Textarea(attrs={"rows": 6, "cols": 100, "style": "font-family: monospace"}),
        help_text='What the served chat endpoint does with a returned tool call that breaks a rule: '
        '{"default": "flag", "rules": {"denied-tool": "block"}}. Actions: block (the client gets a refusal and '
        "the call goes to triage), flag (returned, recorded as unsafe), off (not checked). Rule ids are the "
        "policy's (denied-tool for denied_tools). Empty: flag every rule.",
    )

    class Meta:
        model = AgentPolicy
        fields = ["agent", "policy", "guardrails"]

    def clean_policy(self) -> Any:
        policy = self.cleaned_data["policy"]
        services.policy_validate(policy)
        return policy

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if "policy" in cleaned and "guardrails" in cleaned:
            try:
                services.guardrails_validate(_or_empty(cleaned["guardrails"]),
                                             policy=services.policy_validate(cleaned["policy"]))  # fmt: skip
            except ValidationError as error:
                self.add_error("guardrails", error)
        return cleaned


@admin.register(AgentPolicy)
class AgentPolicyAdmin(admin.ModelAdmin):
    form = AgentPolicyForm
    list_display = ["agent", "policy_name", "guardrails", "updated_by", "updated_at"]

    @admin.display(description="policy")
    def policy_name(self, obj: AgentPolicy) -> str:
        return str(obj.policy.get("name", "custom")) if isinstance(obj.policy, dict) else json.dumps(obj.policy)[:40]

    def save_model(self, request: AuthedRequest, obj: AgentPolicy, form: Any, change: bool) -> None:  # type: ignore[override]
        record = services.agent_policy_set(actor=request.user, agent=obj.agent, policy=form.cleaned_data["policy"],
                                           guardrails=_or_empty(form.cleaned_data["guardrails"]))  # fmt: skip
        obj.pk = record.pk

    def delete_model(self, request: AuthedRequest, obj: AgentPolicy) -> None:  # type: ignore[override]
        services.agent_policy_clear(actor=request.user, agent=obj.agent)

    def delete_queryset(self, request: AuthedRequest, queryset: QuerySet[AgentPolicy]) -> None:  # type: ignore[override]
        for record in queryset.select_related("agent"):
            self.delete_model(request, record)
