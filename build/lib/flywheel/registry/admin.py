"""Django admin for the registry: read-only views of versions, gates and deployments.

Nothing is added, changed or deleted here: versions come from training jobs, and promotion and
rollback go through the approver's pages, which check the gate and record the audit trail.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from flywheel.registry.models import Deployment, GatePolicy, GateResult, LivePointer, ModelVersion


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ModelVersion)
class ModelVersionAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "base_model", "adapter_sha256", "created_at"]
    list_filter = ["agent"]


@admin.register(GateResult)
class GateResultAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "status", "created_at"]


@admin.register(Deployment)
class DeploymentAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "actor_name", "override", "created_at"]
    list_filter = ["agent", "action"]


@admin.register(LivePointer)
class LivePointerAdmin(ReadOnlyAdmin):
    list_display = ["agent", "version", "updated_at"]


@admin.register(GatePolicy)
class GatePolicyAdmin(ReadOnlyAdmin):
    list_display = ["agent", "updated_at"]
