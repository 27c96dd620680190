"""The tool filter: a rare tool is looked up by its trajectories' ids, a common one tested per row; both agree."""

from __future__ import annotations

import pytest

from flywheel.core.roles import Role
from flywheel.ingest import selectors
from flywheel.ingest.models import Step
from flywheel.ingest.parsers import FieldMapping
from flywheel.ingest.selectors import TrajectoryFilters, trajectory_queryset
from flywheel.ingest.services import IngestOptions, stream_ingest
from tests.flywheel.ingest.conftest import TAU_MAPPING

pytestmark = pytest.mark.django_db


def _with_tool(viewer, tool: str) -> list[str]:
    rows = trajectory_queryset(TrajectoryFilters(tool=tool), viewer=viewer).order_by("-ingested_at", "-id")
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
        assert {tool: sorted(_with_tool(viewer, tool)) for tool in tools} == expected
