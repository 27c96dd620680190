"""Two approvers at once, each on their own database connection: one change, one live version."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from flywheel.core.roles import Role
from flywheel.registry import selectors, services
from flywheel.registry.models import Deployment, LivePointer

pytestmark = pytest.mark.django_db(transaction=True)


def at_once(calls) -> list[object]:
    """Run the calls on threads released together; each thread has its own connection. Results or exceptions."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[object] = [None] * len(calls)

    def run(index, call):
        try:
            barrier.wait(timeout=10)
            outcomes[index] = call()
        except Exception as error:  # noqa: BLE001 - the test inspects what each thread got
            outcomes[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return outcomes


def test_two_approvers_promoting_different_versions_at_once_make_one_change(register, make_user):
    first, second = register(0), register(1)
    alice, bob = make_user(Role.APPROVER), make_user(Role.APPROVER)
    outcomes = at_once([
        lambda: services.version_promote(actor=alice, version=first, reason="alice", expected_live=None),
        lambda: services.version_promote(actor=bob, version=second, reason="bob", expected_live=None),
    ])  # fmt: skip
    deployments = [outcome for outcome in outcomes if isinstance(outcome, Deployment)]
    conflicts = [outcome for outcome in outcomes if isinstance(outcome, services.PromotionConflict)]
    assert len(deployments) == 1 and len(conflicts) == 1, outcomes
    assert Deployment.objects.count() == 1 and LivePointer.objects.count() == 1
    assert selectors.live_version(agent=first.agent) == deployments[0].to_version


def test_a_double_click_on_promote_makes_one_change(register, make_user):
    version = register(0)
    approver = make_user(Role.APPROVER)
    outcomes = at_once([lambda: services.version_promote(actor=approver, version=version, reason="go",
                                                         expected_live=None)] * 3)  # fmt: skip
    assert sum(isinstance(outcome, Deployment) for outcome in outcomes) == 1
    assert outcomes.count(None) == 2, outcomes
    assert Deployment.objects.count() == 1 and LivePointer.objects.get().version == version
