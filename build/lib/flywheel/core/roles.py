"""The roles of DESIGN.md and the permissions each grants.

Roles are Django groups; the permissions are custom ones on `core.Capability`. A data
migration creates both from the tables below, so changing a role means a new migration
that calls `sync_roles` again.
"""

from __future__ import annotations

from enum import StrEnum


class Perm(StrEnum):
    """Permission names as `has_perm` takes them (`app_label.codename`)."""

    VIEW = "core.view_flywheel"
    INGEST = "core.ingest_trajectories"
    TRIAGE = "core.triage_trajectories"
    EDIT_TASKS = "core.edit_tasks"
    LAUNCH_JOBS = "core.launch_jobs"
    APPROVE_VERSIONS = "core.approve_versions"
    VIEW_AUDIT = "core.view_audit"
    MANAGE = "core.manage_flywheel"
    # Not a role's verb but a scope: its holders see every agent's rows; others, the agents they
    # are members of (`flywheel.core.selectors`). The admin role carries it.
    ALL_AGENTS = "core.access_all_agents"

    @property
    def codename(self) -> str:
        return self.value.split(".", 1)[1]


PERMISSION_DESCRIPTIONS: dict[Perm, str] = {
    Perm.VIEW: "Can view trajectories, tasks, jobs, models and dashboards",
    Perm.INGEST: "Can upload and send trajectories",
    Perm.TRIAGE: "Can review and bucket trajectories",
    Perm.EDIT_TASKS: "Can create and edit regression tasks and task sets",
    Perm.LAUNCH_JOBS: "Can launch, cancel and retry evaluation and training jobs",
    Perm.APPROVE_VERSIONS: "Can approve, promote and roll back model versions",
    Perm.VIEW_AUDIT: "Can read the audit log",
    Perm.MANAGE: "Can manage agents, buckets, policies and gate criteria",
    Perm.ALL_AGENTS: "Can see and act on every agent's data (others: the agents they are members of)",
}


class Role(StrEnum):
    VIEWER = "viewer"
    REVIEWER = "reviewer"
    TRAINER = "trainer"
    APPROVER = "approver"
    ADMIN = "admin"


ROLE_PERMISSIONS: dict[Role, frozenset[Perm]] = {
    Role.VIEWER: frozenset({Perm.VIEW}),
    Role.REVIEWER: frozenset({Perm.VIEW, Perm.INGEST, Perm.TRIAGE, Perm.EDIT_TASKS}),
    Role.TRAINER: frozenset({Perm.VIEW, Perm.LAUNCH_JOBS}),
    Role.APPROVER: frozenset({Perm.VIEW, Perm.APPROVE_VERSIONS, Perm.VIEW_AUDIT}),
    Role.ADMIN: frozenset(Perm),
}
