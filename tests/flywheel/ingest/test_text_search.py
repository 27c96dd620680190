"""Text search pages: the newest rows are searched first, the trigram index after; both give the same page."""

from __future__ import annotations

import pytest

from flywheel.core.roles import Role
from flywheel.ingest import selectors
from flywheel.ingest.selectors import Cursor, TrajectoryFilters, trajectory_page
from tests.flywheel.ingest.test_views import native, store

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(make_user):
    return make_user(Role.VIEWER)


def _pages(viewer, text: str, size: int) -> list[list[str]]:
    pages, after = [], None
    while True:
        rows, after = trajectory_page(filters=TrajectoryFilters(text=text), viewer=viewer, after=after, size=size)
        pages.append([row.external_id for row in rows])
        if after is None:
            return pages


def _stored(count: int, *, matching) -> None:
    """`count` trajectories in file order (oldest first), those `matching(n)` says with "refund" in them."""
    store([native(f"t{n:02d}", final_result="refund issued" if matching(n) else "done") for n in range(count)])


@pytest.mark.parametrize("probe_rows", [3, 6, 500])
def test_a_common_word_pages_newest_first_whatever_the_probe_reads(viewer, monkeypatch, probe_rows):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", probe_rows)
    _stored(20, matching=lambda n: n % 2 == 0)
    assert _pages(viewer, "REFUND", 3) == [["t18", "t16", "t14"], ["t12", "t10", "t08"], ["t06", "t04", "t02"], ["t00"]]


@pytest.mark.parametrize("probe_rows", [3, 500])
def test_a_rare_word_beyond_the_newest_rows_is_found_through_the_index(viewer, monkeypatch, probe_rows):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", probe_rows)
    _stored(12, matching=lambda n: n in (1, 2))
    assert _pages(viewer, "refund", 5) == [["t02", "t01"]]
    assert _pages(viewer, "nowhere", 5) == [[]]


def test_the_text_search_pages_after_a_cursor_like_the_unfiltered_list(viewer, monkeypatch):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 4)
    _stored(10, matching=lambda n: True)
    everything = [row.external_id for row in trajectory_page(filters=TrajectoryFilters(), viewer=viewer, after=None,
                                                              size=10)[0]]  # fmt: skip
    assert sum(_pages(viewer, "refund", 4), []) == everything
    assert Cursor.decode("not a cursor") is None


def test_a_text_search_with_nothing_stored_is_an_empty_page(viewer):
    assert _pages(viewer, "refund", 5) == [[]]
