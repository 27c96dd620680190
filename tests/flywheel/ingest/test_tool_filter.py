"""The tool filter: a rare tool is looked up by its trajectories' ids, a common one tested per row; both agree.
A tool in few enough trajectories leads the lists' pages (`ToolLead`): the same pages as the walk."""

from __future__ import annotations

import pytest

from flywheel.core.roles import Role
from flywheel.ingest import selectors
from flywheel.ingest.models import Step, Trajectory
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.selectors import TrajectoryFilters, trajectory_page, trajectory_queryset
from flywheel.ingest.services import IngestOptions, stream_ingest
from flywheel.triage.selectors import TriageFilters, triage_page
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = pytest.mark.django_db


def _with_tool(viewer, filters: TrajectoryFilters) -> list[str]:
    rows = trajectory_queryset(filters, viewer=viewer).order_by("-ingested_at", "-id")
    return [str(pk) for pk in rows.values_list("pk", flat=True)]


def test_a_rare_and_a_common_tool_list_the_same_trajectories_either_way(make_user, tau_bench_path, monkeypatch):
    with tau_bench_path.open("rb") as stream:
        stream_ingest(
            stream=stream, options=IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING))
        )
    viewer = make_user(Role.VIEWER)
    tools = ["cancel_reservation", "get_reservation_details", "no_such_tool"]
    expected = {
        tool: sorted({str(pk) for pk in Step.objects.filter(tool_name=tool).values_list("trajectory_id", flat=True)})
        for tool in tools
    }
    assert 0 < len(expected["cancel_reservation"]) < len(expected["get_reservation_details"])
    for steps in (0, 10**6):  # every tool tested per row; every tool looked up by id
        monkeypatch.setattr(selectors, "RARE_TOOL_STEPS", steps)
        assert {tool: sorted(_with_tool(viewer, TrajectoryFilters(tool=tool))) for tool in tools} == expected


@pytest.fixture
def tau_with_ties(make_user, tau_bench_path):
    """The 200 tau-bench trajectories, 30 pairs of them stored in the same microsecond (ordered by id)."""
    with tau_bench_path.open("rb") as stream:
        stream_ingest(
            stream=stream, options=IngestOptions(format="openai-chat", mapping=FieldMapping.from_pairs(TAU_MAPPING))
        )
    trajectories = list(Trajectory.objects.order_by("pk"))
    for first, second in zip(trajectories[0:60:2], trajectories[1:60:2], strict=True):
        Trajectory.objects.filter(pk=second.pk).update(ingested_at=first.ingested_at)
    return make_user(Role.VIEWER)


def _paged(filters: TrajectoryFilters, viewer, *, triage: bool) -> list[str]:
    shown, cursor = [], None
    while True:
        if triage:
            page, cursor = triage_page(filters=TriageFilters(base=filters), viewer=viewer, after=cursor, size=4)
        else:
            page, cursor = trajectory_page(filters=filters, viewer=viewer, after=cursor, size=4)
        shown += [str(row.pk) for row in page]
        if cursor is None:
            return shown


@pytest.mark.parametrize("triage", [False, True], ids=["trajectory list", "triage list"])
@pytest.mark.parametrize("tool", ["cancel_reservation", "book_reservation", "get_reservation_details"])
def test_a_list_led_by_its_tool_pages_exactly_as_the_walk(tau_with_ties, monkeypatch, tool, triage, led_pages):
    """Led in chunks of 3 trajectories, their places read 5 at a time, and with the outcome filter
    rejecting some of them: every page as the newest-first walk gives it, ties in the same microsecond
    included."""
    monkeypatch.setattr(selectors, "_LEAD_CHUNK", 3)
    monkeypatch.setattr(selectors, "LEAD_ROWS", 600)
    monkeypatch.setattr(selectors, "_PLACES_CHUNK", 5)
    for filters in (TrajectoryFilters(tool=tool), TrajectoryFilters(tool=tool, outcome="failure")):
        expected = _with_tool(tau_with_ties, filters)
        assert len(expected) > 8, "a tool in two pages or fewer proves little"
        assert _paged(filters, tau_with_ties, triage=triage) == expected
    assert led_pages and all(led_pages)


@pytest.mark.parametrize(
    ("limit", "value"), [("LEAD_TOOL_STEPS", 5), ("LEAD_TOOL_TRAJECTORIES", 5)], ids=["steps", "trajectories"]
)
def test_a_tool_called_too_often_to_lead_is_walked(tau_with_ties, monkeypatch, limit, value, led_pages):
    monkeypatch.setattr(selectors, limit, value)
    filters = TrajectoryFilters(tool="cancel_reservation")
    assert _paged(filters, tau_with_ties, triage=False) == _with_tool(tau_with_ties, filters)
    assert led_pages and not any(led_pages)
