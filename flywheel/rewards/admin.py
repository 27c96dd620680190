"""Django admin for reward profiling: read-only, since runs, scores and marks are written by `services`.

Runs are made and re-verified on the rewards pages, where each write is validated and audited;
here admins can look rows up and follow their links.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from flywheel.rewards.models import Mark, ProfiledOutput, ProfileRun


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(ProfileRun)
class ProfileRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "snapshot", "verifier", "environment", "source_kind", "sample_size", "parent", "created_at"]
    list_filter = ["verifier", "environment", "source_kind"]
    raw_id_fields = ["snapshot", "parent", "root", "created_by"]


@admin.register(ProfiledOutput)
class ProfiledOutputAdmin(ReadOnlyAdmin):
    list_display = ["run", "position", "task_ref", "reward", "passed", "source_ref"]
    search_fields = ["task_ref", "source_ref"]
    raw_id_fields = ["run", "origin", "item", "task"]


@admin.register(Mark)
class MarkAdmin(ReadOnlyAdmin):
    list_display = ["output", "reviewer", "verdict", "updated_at"]
    list_filter = ["verdict"]
    raw_id_fields = ["output", "reviewer"]
