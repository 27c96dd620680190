"""Django admin for agents (and their members and teams), API tokens (revoke only; create them on the account
page) and the audit log."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from flywheel.core import services
from flywheel.core.models import Agent, ApiToken, AuditEvent


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "tools_source", "environment", "record_served", "served_sample_rate",
                    "member_count", "created_at"]  # fmt: skip
    search_fields = ["name", "description", "members__username"]
    filter_horizontal = ["members", "teams"]

    @admin.display(description="members")
    def member_count(self, obj: Agent) -> int:
        return obj.members.count()

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        if change:
            services.agent_update(actor=request.user, agent=obj, description=obj.description, tools=obj.tools,
                                  environment=obj.environment)
        else:
            created = services.agent_create(
                actor=request.user, name=obj.name, description=obj.description, tools=obj.tools,
                environment=obj.environment,
            )
            obj.pk = created.pk
        if {"record_served", "served_sample_rate"} & set(form.changed_data):
            services.agent_served_recording_set(actor=request.user, agent=obj, enabled=obj.record_served,
                                                sample_rate=obj.served_sample_rate)  # fmt: skip
        if {"price_input_per_million", "price_output_per_million"} & set(form.changed_data):
            services.agent_prices_set(actor=request.user, agent=obj, input_per_million=obj.price_input_per_million,
                                      output_per_million=obj.price_output_per_million)  # fmt: skip

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        if {"members", "teams"} & set(form.changed_data):
            agent = form.instance
            members = sorted(agent.members.values_list("username", flat=True))
            teams = sorted(agent.teams.values_list("name", flat=True))
            services.audit_record(actor=request.user, action="agent.access", target=agent,
                                  data={"members": members, "teams": teams})  # fmt: skip


@admin.action(description="Revoke the selected tokens")
def revoke_tokens(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
    for token in queryset:
        services.api_token_revoke(actor=request.user, token=token)
    messages.success(request, f"{queryset.count()} token(s) revoked.")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = [
        "user", "name", "prefix", "key_hash", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at"
    ]  # fmt: skip
    actions = [revoke_tokens]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_name", "action", "target_type", "target_repr"]
    list_filter = ["action", "target_type"]
    search_fields = ["actor_name", "target_repr", "target_id"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
