"""Text search pages: words through the tsvector column, substrings through the trigram index; the newest
rows are searched first, the index after, and both give the same page."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from flywheel.core.roles import Role
from flywheel.core.services import agent_create
from flywheel.ingest import selectors
from flywheel.ingest.selectors import Cursor, TrajectoryFilters, trajectory_page
from tests.conftest import REPO_ROOT
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


def _stored(count: int, *, matching, text: str = "refund issued") -> None:
    """`count` trajectories in file order (oldest first), those `matching(n)` says with `text` in them."""
    store([native(f"t{n:02d}", final_result=text if matching(n) else "done") for n in range(count)])


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


@pytest.mark.parametrize("probe_rows", [2, 500])
def test_a_word_search_finds_whole_words_on_every_page_in_keyset_order(viewer, monkeypatch, probe_rows):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", probe_rows)
    texts = {
        1: "Refund issued",
        3: "refunded already",
        4: "no REFUND.",
        6: "call get_refund",
        8: "refund",
        9: "prefund",
    }
    store([native(f"t{n:02d}", final_result=texts.get(n, "done")) for n in range(11)])
    # Whole words only: "refunded" and "prefund" hold the letters, not the word; the underscore splits words.
    assert _pages(viewer, "refund", 2) == [["t08", "t06"], ["t04", "t01"]]


def test_a_word_search_for_a_phrase_wants_its_words_next_to_each_other_in_order(viewer):
    texts = {0: "the refund was issued", 1: "Refund issued", 2: "issued refund", 3: "refund,  issued"}
    store([native(f"t{n}", final_result=text) for n, text in texts.items()])
    assert _pages(viewer, "refund   ISSUED", 10) == [["t3", "t1"]]
    assert _pages(viewer, "refund issued now", 10) == [[]]


def test_a_word_joined_to_others_by_punctuation_is_still_a_word(viewer):
    texts = {0: "<img onerror='window.pwned=1'>", 1: "mail user@example.com now", 2: "total 12.5 EUR",
             3: "see /var/log/app.log", 4: "pwnedexample"}  # fmt: skip
    store([native(f"t{n}", final_result=text) for n, text in texts.items()])
    assert _pages(viewer, "pwned", 10) == [["t0"]]
    assert _pages(viewer, "example", 10) == [["t1"]]
    assert _pages(viewer, "12", 10) == [["t2"]]
    assert _pages(viewer, "var log", 10) == [["t3"]]


def test_a_quoted_text_or_one_with_punctuation_is_searched_as_a_substring(viewer):
    texts = {0: "refunded already", 1: "ticket AB-1234 held", 2: "see /var/log/app.log", 3: "refund", 4: "a__b"}
    store([native(f"t{n}", final_result=text) for n, text in texts.items()])
    assert _pages(viewer, '"refun"', 10) == [["t3", "t0"]]
    assert _pages(viewer, "b-12", 10) == [["t1"]]
    assert _pages(viewer, "log/app.", 10) == [["t2"]]
    assert _pages(viewer, "__", 10) == [["t4"]]  # underscores alone are no word
    assert _pages(viewer, "refun", 10) == [[]]  # a fragment without quotes is a word that is stored nowhere


HOSTILE = ["a & b", "!refund", "refund:*", "refund <-> issued", "(refund", "'", "\\", '"', '""', "%", "_", "___",
           "a|b", "::", "refund'); drop table x; --", "ü ß", "日本語"]  # fmt: skip


@pytest.mark.parametrize("text", HOSTILE)
def test_tsquery_syntax_in_the_search_text_never_raises(viewer, text):
    _stored(3, matching=lambda n: n == 1, text="refund & issued: (a|b) 100% ok")
    pages = _pages(viewer, text, 2)
    assert all(row in {"t00", "t01", "t02"} for page in pages for row in page)


def test_another_agent_s_rows_are_never_found(make_user):
    own, other = agent_create(actor=None, name="support-bot"), agent_create(actor=None, name="billing-bot")
    store([native(f"own{n}", agent=own.name, final_result="refund issued") for n in range(3)]
          + [native(f"other{n}", agent=other.name, final_result="refund issued") for n in range(3)])  # fmt: skip
    member = make_user(Role.VIEWER, agents=[own])
    for text in ("refund", "refund issued", '"efun"', '"d iss"'):
        assert sorted(sum(_pages(member, text, 2), [])) == ["own0", "own1", "own2"]


@pytest.mark.slow
def test_on_sqlite_every_search_is_a_substring_search(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "MEDIA_ROOT": str(tmp_path / "media"),
           "DJANGO_SETTINGS_MODULE": "flywheel.settings"}  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "tests.flywheel.ingest.sqlite_text_search"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "refun": ["t1", "t0"],
        "refund issued": ["t1"],
        '"refun"': ["t1", "t0"],
        "a & b": ["t2"],
    }


def test_a_queue_by_text_holds_the_rows_the_list_finds(make_user):
    from flywheel.triage.selectors import TriageFilters, queue_members, queue_waiting_members
    from flywheel.triage.services import queue_create

    admin = make_user(Role.ADMIN)
    texts = {0: "Refund issued", 1: "refunded already", 2: "no refund."}
    store([native(f"t{n}", final_result=text) for n, text in texts.items()])
    queue = queue_create(actor=admin, name="refunds", filters=TriageFilters(base=TrajectoryFilters(text="refund")))
    assert sorted(queue_members(queue, viewer=admin).values_list("external_id", flat=True)) == ["t0", "t2"]
    waiting = queue_waiting_members(queue, viewer=admin)  # the filter as a subquery of another trajectory query
    assert sorted((m.trajectory.external_id, m.by_filter) for m in waiting) == [("t0", True), ("t2", True)]


def _searches(viewer, text: str) -> list[str]:
    """The queries the first page (of 2) ran that test the text."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        trajectory_page(filters=TrajectoryFilters(text=text), viewer=viewer, after=None, size=2)
    # An EXPLAIN (the word search's estimate) plans the search but reads no row.
    return [query["sql"] for query in queries
            if text.strip('"') in query["sql"] and not query["sql"].startswith("EXPLAIN")]  # fmt: skip


def _searches_of_page(viewer, text: str) -> int:
    """How many queries the first page ran that test the text."""
    return len(_searches(viewer, text))


def test_a_text_in_fewer_rows_than_the_probe_reads_is_searched_once(viewer, monkeypatch):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 5)
    store([native(f"t{n}", final_result="refund issued" if n == 0 else "done") for n in range(4)])
    assert _searches_of_page(viewer, "refund") == 1  # four rows, all probed: the index has nothing more
    assert _pages(viewer, "refund", 2) == [["t0"]]
    store([native(f"t{n}", final_result="done") for n in (4, 5)])
    assert _searches_of_page(viewer, "refund") == 2  # six: the oldest was not probed, the index is searched
    assert _pages(viewer, "refund", 2) == [["t0"]]


@pytest.mark.parametrize(("probe_rows", "substring_rows"), [(2, 4), (2, 9), (3, 40), (500, 5000)])
def test_a_substring_pages_newest_first_whichever_probe_fills_the_page(viewer, monkeypatch, probe_rows, substring_rows):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", probe_rows)
    monkeypatch.setattr(selectors, "SUBSTRING_PROBE_ROWS", substring_rows)
    _stored(30, matching=lambda n: n % 4 == 1 or n < 3)
    expected = [f"t{n:02d}" for n in range(29, -1, -1) if n % 4 == 1 or n < 3]
    for text in ('"refund issued"', "refund"):  # the substring's two probes, the word's one
        pages = _pages(viewer, text, 3)
        assert sum(pages, []) == expected
        assert all(len(page) == 3 for page in pages[:-1])


def test_a_substring_the_wider_probe_holds_never_searches_the_trigram_index(viewer, monkeypatch):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 2)
    monkeypatch.setattr(selectors, "SUBSTRING_PROBE_ROWS", 9)
    texts = {1: "ancient refusal", 2: "ancient refusal"} | {n: "refund issued" for n in range(0, 24, 3)}
    store([native(f"t{n:02d}", final_result=texts.get(n, "done")) for n in range(24)])
    # One row in three: the 2 newest never fill a page of 2 (it takes 3 rows), the 9 newest do.
    assert _searches_of_page(viewer, '"refund"') == 2  # both probes, not the index
    assert _searches_of_page(viewer, "refund") == 2  # a word: one probe, then its index
    # A substring only in rows older than both probes reaches the index, and finds them.
    assert _searches_of_page(viewer, '"ancient"') == 3
    assert _pages(viewer, '"ancient"', 2) == [["t02", "t01"]]


# A word in rows older than a flood of others. Of 40 rows, newest first, t39 is the 1st and t00 the 40th.
_OLD_WORD_ROWS = {0, 2, 4, 6, 8, 23, 24, 25}


@pytest.mark.parametrize("index_rows", [0, 1000])
def test_a_word_past_the_probe_pages_the_same_walked_or_sorted(viewer, monkeypatch, index_rows):
    """0 walks the list past the probe; 1000 sorts the word's rows (the probe found none of them)."""
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 3)
    monkeypatch.setattr(selectors, "TEXT_INDEX_ROWS", index_rows)
    _stored(40, matching=lambda n: n in _OLD_WORD_ROWS)
    expected = [f"t{n:02d}" for n in sorted(_OLD_WORD_ROWS, reverse=True)]
    for size in (1, 2, 3):
        pages = _pages(viewer, "refund", size)
        assert sum(pages, []) == expected
        assert all(len(page) == size for page in pages[:-1])


def _sorted_past_the_probe(viewer, text: str) -> bool:
    """Whether the search after the probe (for a page of 2) has PostgreSQL sort the word's rows rather than
    walk the list's index; both left cheapest, as on a big table (this one has 40 rows: it would read them all)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        trajectory_page(filters=TrajectoryFilters(text=text), viewer=viewer, after=None, size=2)
    searches = [query["sql"] for query in queries if text in query["sql"] and "LIMIT" in query["sql"]]
    assert len(searches) == 2  # the probe, then the search past it
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {searches[1]}")
        limit = cursor.fetchone()[0][0]["Plan"]
        cursor.execute("RESET enable_seqscan")
        cursor.execute("RESET enable_bitmapscan")
    assert limit["Node Type"] == "Limit"
    return bool(limit["Plans"][0]["Node Type"] == "Sort")


def test_a_word_the_probe_found_far_below_its_share_is_sorted_and_one_spread_evenly_walked(viewer, monkeypatch):
    from django.db import connection

    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 3)
    _stored(40, matching=lambda n: n in _OLD_WORD_ROWS)  # "refund": 8 rows, none among the 3 newest
    store([native(f"s{n:02d}", final_result="shipped") for n in range(40)])
    store([native(f"e{n:02d}", final_result="shipped parcel" if n % 2 else "parcel") for n in range(40)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ingest_trajectory")  # PostgreSQL's row counts, as a big table keeps them
    monkeypatch.setattr(selectors, "TEXT_INDEX_ROWS", 0)
    assert not _sorted_past_the_probe(viewer, "refund")  # skewed, but in more rows than the limit
    monkeypatch.setattr(selectors, "TEXT_INDEX_ROWS", 1000)
    assert _sorted_past_the_probe(viewer, "refund")  # none in the newest 80 of 120 rows: skewed
    # In every other row of the newest 40: the probe found one or two of a page of three, as many as
    # an even spread of its 60 rows puts among 3 of 120.
    assert not _sorted_past_the_probe(viewer, "shipped")


def test_a_phrase_is_sorted_only_when_its_rarest_word_is_in_few_enough_rows(viewer, monkeypatch):
    """PostgreSQL guesses a phrase's rows as if its words were independent (under 30 for the 48 here); the
    rarest word's guess bounds them."""
    from django.db import connection

    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 3)
    store([native(f"a{n:02d}", final_result="alpha beta") for n in range(48)])
    store([native(f"s{n:02d}", final_result="shipped") for n in range(72)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ingest_trajectory")
    monkeypatch.setattr(selectors, "TEXT_INDEX_ROWS", 30)
    assert not _sorted_past_the_probe(viewer, "alpha beta")
    monkeypatch.setattr(selectors, "TEXT_INDEX_ROWS", 60)
    assert _sorted_past_the_probe(viewer, "alpha beta")


@pytest.mark.parametrize(
    ("needle", "words"),
    [
        ("workplace-00421843", "00421843:*"),  # the first run may be a longer word's tail
        ("a.b.c", "b <-> c:*"),
        ("-abc", "abc:*"),  # after punctuation, the first run begins a word
        ("user@example.com ", "example <-> com:*"),
        ("refun", None),  # one run: it may be inside any word
        ("a-", None),
        ("naïve-x", None),  # the vector splits non-ASCII text its own way
        ("x-" + "y" * 3000, None),  # PostgreSQL keeps no word that long
    ],
)
def test_a_substring_s_words_are_those_every_row_holding_it_has(needle, words):
    assert selectors._substring_words(needle) == words


# Texts that hold `workplace-00421843`, with any case, the runs going on either side, and ones that
# hold its words but not it.
_ID_TEXTS = [
    "workplace-00421843",
    "see WORKPLACE-00421843.",
    "xworkplace-004218439y",
    "a_workplace-00421843_b",
    "workplace 00421843",
    "workplace--00421843",
    "workplace_00421843",
    "00421843 workplace-",
    "workplace-0042",
    "done",
]


@pytest.mark.parametrize("needle", ["workplace-00421843", "kplace-004218", "-00421843", "e-0042", '"place 00421843"'])
def test_a_substring_narrowed_by_its_words_finds_every_row_that_holds_it(viewer, monkeypatch, needle):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 2)
    monkeypatch.setattr(selectors, "SUBSTRING_PROBE_ROWS", 4)
    store([native(f"t{n:02d}", final_result=text) for n, text in enumerate(_ID_TEXTS * 2)])
    expected = [f"t{n:02d}" for n in range(2 * len(_ID_TEXTS) - 1, -1, -1)
                if needle.strip('"').lower() in (_ID_TEXTS * 2)[n].lower()]  # fmt: skip
    assert expected
    monkeypatch.setattr(selectors, "SUBSTRING_INDEX_ROWS", 1000)
    assert _searches_of_page(viewer, needle) == 1  # the rows the word index names, nothing else
    assert sum(_pages(viewer, needle, 2), []) == expected
    monkeypatch.setattr(selectors, "SUBSTRING_INDEX_ROWS", 0)
    assert _searches_of_page(viewer, needle) == 3  # both probes, then the trigram index
    assert sum(_pages(viewer, needle, 2), []) == expected


def _narrowing_runs(viewer, text: str) -> tuple[int, bool]:
    """How many queries the first page (of 2) ran that test the text, and whether one read the rows its
    words narrow it to."""
    searches = _searches(viewer, text)
    return len(searches), any("to_tsquery" in sql for sql in searches)


@pytest.mark.parametrize(
    ("matching", "table_rows", "runs"),
    [
        # Ten rows of thirty, the newest among them, and a table said to hold 30: the probe of 6 could
        # not be expected to find 3 (10 * 6 < 3 * 30), so the narrowed rows are read first.
        (lambda n: n % 3 == 0, 30, (1, True)),
        # Said to hold 15, the probe goes first, finds 2 in the newest 6 (t27, t24): walking on for one
        # more at that rate reads 3 rows, the narrowing 10, so the wider probe ends it.
        (lambda n: n % 3 == 0, 15, (2, False)),
        # Only old rows hold it: the probe finds none, and the narrowed rows are read after it.
        (lambda n: n < 10 and n % 3 == 0, 15, (2, True)),
    ],
)
def test_a_narrowed_substring_is_read_before_or_after_the_probe_or_walked_by_the_cost(
    viewer, monkeypatch, matching, table_rows, runs
):
    monkeypatch.setattr(selectors, "TEXT_PROBE_ROWS", 6)
    monkeypatch.setattr(selectors, "SUBSTRING_PROBE_ROWS", 12)
    _stored(30, matching=matching, text="see workplace-0042 now")
    monkeypatch.setattr(selectors, "_estimated_rows", lambda rows: 10.0)  # PostgreSQL's guess, made exact
    monkeypatch.setattr(selectors, "_table_rows", lambda: float(table_rows))
    assert _narrowing_runs(viewer, "workplace-0042") == runs
    assert sum(_pages(viewer, "workplace-0042", 2), []) == [f"t{n:02d}" for n in range(29, -1, -1) if matching(n)]
