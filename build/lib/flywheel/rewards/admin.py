"""Django admin for reward profiling: read-only (runs, scores, marks, judgements are written by `services`),
but for each agent's judge settings, which the team edits here.

Runs are made and re-verified on the rewards pages, where each write is validated and audited;
here admins can look rows up and follow their links.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from flywheel.rewards.models import AgentJudge, Judgement, JudgeRun, Mark, ProfiledOutput, ProfileRun


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


@admin.register(AgentJudge)
class AgentJudgeAdmin(admin.ModelAdmin):
    """Editable: the team sets each agent's judge model, rubric and agreement threshold here (validated by `clean`)."""

    list_display = ["agent", "base_model", "adapter", "agreement_threshold"]
    raw_id_fields = ["agent"]


@admin.register(JudgeRun)
class JudgeRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "job", "base_model", "created_at"]
    raw_id_fields = ["run", "job", "created_by"]


@admin.register(Judgement)
class JudgementAdmin(ReadOnlyAdmin):
    list_display = ["judge_run", "output", "score", "passed"]
    raw_id_fields = ["judge_run", "output"]
