"""Django admin for monitoring: read-only views of rules, scores and alerts.

Rules change on their pages (audited there); scores come from the scorers and alerts from the
regression check, and changing them by hand would falsify the monitor.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from flywheel.monitoring.models import Alert, OnlineScore, ScoringRule


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ScoringRule)
class ScoringRuleAdmin(ReadOnlyAdmin):
    list_display = ["name", "agent", "sample_rate", "scorers", "enabled", "updated_at"]
    list_filter = ["agent", "enabled"]


@admin.register(OnlineScore)
class OnlineScoreAdmin(ReadOnlyAdmin):
    list_display = ["trajectory", "scorer", "passed", "rule", "created_at"]
    list_filter = ["scorer", "passed"]


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "p_value", "opened_at", "resolved_at", "resolution"]
    list_filter = ["agent", "rate"]
