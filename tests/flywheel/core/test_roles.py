from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from flywheel.core.roles import ROLE_PERMISSIONS, Perm, Role


@pytest.mark.django_db
@pytest.mark.parametrize("role", list(Role))
def test_the_migration_creates_each_role_with_its_permissions(role):
    group = Group.objects.get(name=role.value)
    granted = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}
    assert granted == {perm.value for perm in ROLE_PERMISSIONS[role]}


def test_only_admins_manage_and_only_approvers_and_admins_promote():
    assert [role for role in Role if Perm.MANAGE in ROLE_PERMISSIONS[role]] == [Role.ADMIN]
    assert {role for role in Role if Perm.APPROVE_VERSIONS in ROLE_PERMISSIONS[role]} == {Role.APPROVER, Role.ADMIN}
    assert all(Perm.VIEW in perms for perms in ROLE_PERMISSIONS.values())
