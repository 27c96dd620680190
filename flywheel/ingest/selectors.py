"""Reads of the ingest app: the filtered trajectory list with keyset pagination, one trace, uploads.

Every read takes the viewer and keeps to the agents they may see (`flywheel.core.selectors`).
Text search (`text_match`): words through the `search_vector` column on PostgreSQL, a substring
otherwise.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import cached_property
from typing import Any, Protocol
from uuid import UUID

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import (
    BooleanField,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    TextField,
    Value,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Concat
from django.db.models.lookups import IContains
from django.utils import timezone

from flywheel.core.selectors import agent_names_filter, agents_filter, sees_all_agents
from flywheel.ingest.models import Feedback, Step, Trajectory, Upload

FEEDBACK_ANY = "any"
# How many of the newest rows a text search reads one by one before it turns to an index
# (`_text_page`): a word search after the first reach, a substring search after the second.
TEXT_PROBE_ROWS = 500
SUBSTRING_PROBE_ROWS = 5000
# A substring search the word index narrows to at most this many rows may read just those (`_text_page`).
SUBSTRING_INDEX_ROWS = 5_000
# A word search the probe did not answer reads the word's rows through its index and sorts them when
# PostgreSQL expects at most TEXT_INDEX_ROWS of them and the probe found under a quarter of what they
# would put among the probed rows if spread evenly (`_word_page`); else the list is walked.
TEXT_INDEX_ROWS = 50_000
TEXT_ESTIMATED_WORDS = 4  # a phrase is in at most as many rows as the rarest of its first four words
# A tool called in at most this many steps is filtered by its trajectories' ids (`_tool_filter`).
RARE_TOOL_STEPS = 1000
# A search text of letters, digits, underscores and spaces only is a word search (`text_match`).
_WORDS = re.compile(r"[\w\s]+")
_LEXEME = re.compile(r"[^\W_]+")  # the search vector reads punctuation, the underscore too, as a space
_ASCII_PRINTABLE = re.compile(r"[ -~\t\n]+")
# PostgreSQL leaves out of a tsvector any word longer than 2,047 bytes.
_LONGEST_WORD = 2047


@dataclass(frozen=True)
class TrajectoryFilters:
    outcome: str = ""
    agent: str = ""
    model_version: str = ""
    tool: str = ""
    has_error: bool | None = None
    since: date | None = None
    until: date | None = None
    text: str = ""
    feedback: str = ""  # "up" or "down": with a thumb so; FEEDBACK_ANY: with any feedback


@dataclass(frozen=True)
class Cursor:
    """Where a page ends, in the list's order (newest first): keyset pagination, no OFFSET or COUNT."""

    ingested_at: datetime
    id: UUID

    def encode(self) -> str:
        return base64.urlsafe_b64encode(f"{self.ingested_at.isoformat()}|{self.id}".encode()).decode()

    @classmethod
    def decode(cls, token: str) -> Cursor | None:
        try:
            stamp, _, ident = base64.urlsafe_b64decode(token.encode()).decode().partition("|")
            return cls(datetime.fromisoformat(stamp), UUID(ident))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def trajectory_queryset(filters: TrajectoryFilters, *, viewer: User, text: bool = True) -> QuerySet[Trajectory]:
    """The trajectories `viewer` may see that match `filters`; without the text filter when `text` is False
    (`keyset_page` applies it itself, newest rows first)."""
    rows = Trajectory.objects.select_related("agent").filter(agents_filter(viewer))
    if filters.outcome:
        rows = rows.filter(outcome=filters.outcome)
    if filters.agent:
        rows = rows.filter(agent__name=filters.agent)
    if filters.model_version:
        rows = rows.filter(model_version=filters.model_version)
    if filters.has_error is not None:
        rows = rows.filter(has_error=filters.has_error)
    if filters.since:
        rows = rows.filter(ingested_at__gte=_day_start(filters.since))
    if filters.until:
        rows = rows.filter(ingested_at__lt=_day_start(filters.until + timedelta(days=1)))
    if filters.tool:
        rows = rows.filter(_tool_filter(filters.tool))
    if filters.text and text:
        rows = rows.filter(text_match(filters.text))
    if filters.feedback:
        given = Feedback.objects.filter(trajectory=OuterRef("pk"))
        if filters.feedback != FEEDBACK_ANY:
            given = given.filter(thumb=filters.feedback)
        rows = rows.filter(Exists(given))
    # The agent's tool catalogue can be hundreds of kilobytes, read again with every row (measured: most
    # of a page's time at 1,000,000 trajectories when its rows are the function-caller agent's).
    return rows.defer("search_text", "metadata", "final_result", "agent__tools")


def _tool_filter(tool: str) -> Q:
    """The trajectories with a step calling `tool`. A rare tool's few trajectories are looked up by id: the
    newest-first walk with a per-row test would read every trajectory before finding that none (or few) match.
    Up to RARE_TOOL_STEPS of its steps are read from the (tool_name, trajectory) index to tell."""
    calls = _calling_trajectories(tool, RARE_TOOL_STEPS + 1)
    if len(calls) <= RARE_TOOL_STEPS:
        return Q(pk__in=set(calls))
    return Q(Exists(Step.objects.filter(trajectory=OuterRef("pk"), tool_name=tool)))


def _calling_trajectories(tool: str, steps: int) -> list[UUID]:
    """The trajectory of each of the first `steps` steps calling `tool` (repeats kept), from the
    (tool_name, trajectory) index; unordered: Step's default ordering would join every trajectory."""
    calls = Step.objects.filter(tool_name=tool).order_by().values_list("trajectory_id", flat=True)
    return list(calls[:steps])


def trajectory_page(
    *, filters: TrajectoryFilters, viewer: User, after: Cursor | None, size: int = 50
) -> tuple[list[Trajectory], Cursor | None]:
    """One page of the list and the cursor of the next one (None on the last page)."""
    rows = trajectory_queryset(filters, viewer=viewer, text=False)
    return keyset_page(rows, after=after, size=size, text=filters.text, lead=list_lead(filters))


class Lead(Protocol):
    """A filter whose own rows lead a page (`_led_page`): for a filter that matches few of the newest
    trajectories, the newest-first walk tests row after row (tens of thousands for one page at a
    million); the filter's rows name the only candidates."""

    def rows_after(self, after: Cursor | None, limit: int) -> list[Cursor] | None:
        """Up to `limit` of the filter's trajectories after `after`, in list order; None when this lead
        cannot tell (the list is walked instead)."""
        ...


@dataclass(frozen=True)
class CopyLead:
    """A filter's table read in list order through the copy of its trajectory's `ingested_at` beside
    each row (migrations ingest 0010, triage 0008): its rows matching `where`, on PostgreSQL.
    `table` and `where` are this code's own SQL, never a user's text (that goes in `params`)."""

    table: str
    where: str
    params: tuple[Any, ...]

    def rows_after(self, after: Cursor | None, limit: int) -> list[Cursor]:
        since = "" if after is None else " AND (trajectory_ingested_at, trajectory_id) < (%s, %s)"
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT trajectory_ingested_at, trajectory_id FROM {self.table} WHERE {self.where}{since} "
                "ORDER BY trajectory_ingested_at DESC, trajectory_id DESC LIMIT %s",
                [*self.params, *((after.ingested_at, after.id) if after else ()), limit],
            )
            return [Cursor(stamp, ident) for stamp, ident in cursor.fetchall()]


# A tool called in at most this many steps, in at most this many trajectories, leads the lists
# (`ToolLead`). Its trajectories' places are read by primary key, a thousand at a time: about 10 ms
# a thousand at a million (one query for several thousand makes PostgreSQL scan the table, 110 ms).
# A tool more common than that is found by the walk soon enough.
LEAD_TOOL_STEPS = 20_000
LEAD_TOOL_TRAJECTORIES = 5_000
_PLACES_CHUNK = 1000


@dataclass
class ToolLead:
    """The trajectories with a step calling `tool`, when there are few enough to read whole.

    A tool whose calls are old or spread thin (some thousands of steps among ten million) is found
    by the walk only after hundreds of thousands of rows: 1.6 s for the triage list at a million,
    where PostgreSQL's estimate for the step test picks the walk. Its trajectories' places in the
    list are read once per page and kept in memory, newest first."""

    tool: str

    @cached_property
    def _places(self) -> list[Cursor] | None:
        called_in = _calling_trajectories(self.tool, LEAD_TOOL_STEPS + 1)
        ids = list(set(called_in))
        if len(called_in) > LEAD_TOOL_STEPS or len(ids) > LEAD_TOOL_TRAJECTORIES:
            return None
        rows = Trajectory.objects.order_by().values_list("ingested_at", "id")
        places = [
            row
            for start in range(0, len(ids), _PLACES_CHUNK)
            for row in rows.filter(pk__in=ids[start : start + _PLACES_CHUNK])
        ]
        # Python orders UUIDs by their bytes, as PostgreSQL does: the same order as the list's.
        return [Cursor(stamp, ident) for stamp, ident in sorted(places, reverse=True)]

    def rows_after(self, after: Cursor | None, limit: int) -> list[Cursor] | None:
        if self._places is None:
            return None
        if after is None:
            return self._places[:limit]
        return [place for place in self._places if (place.ingested_at, place.id) < (after.ingested_at, after.id)][
            :limit
        ]


def feedback_lead(filters: TrajectoryFilters) -> Lead | None:
    """The feedback filter's rows, on PostgreSQL: feedback comes for a few percent of trajectories."""
    if connection.vendor != "postgresql" or not filters.feedback:
        return None
    if filters.feedback == FEEDBACK_ANY:
        return CopyLead("ingest_feedback", "TRUE", ())
    return CopyLead("ingest_feedback", "thumb = %s", (filters.feedback,))


def list_lead(filters: TrajectoryFilters) -> Lead | None:
    """The filter of the trajectory list that leads its pages, if any."""
    return feedback_lead(filters) or (ToolLead(filters.tool) if filters.tool else None)


def keyset_page(
    rows: QuerySet[Trajectory], *, after: Cursor | None, size: int, text: str = "", lead: Lead | None = None
) -> tuple[list[Trajectory], Cursor | None]:
    """Newest first from `after` on, by (ingested_at, id): no OFFSET, so deep pages cost what the first does.

    With `text`, the rows containing it: see `_text_page`. With a `lead` (and no text), the rows found
    among the leading filter's (`_led_page`), else walked.
    """
    if after is not None:
        rows = rows.filter(Q(ingested_at__lt=after.ingested_at) | Q(ingested_at=after.ingested_at, id__lt=after.id))
    ordered = rows.order_by("-ingested_at", "-id")
    page = None
    if text:
        page = _text_page(ordered, text=text, size=size)
    elif lead is not None:
        page = _led_page(ordered, lead=lead, after=after, size=size)
    if page is None:
        page = list(ordered[: size + 1])
    if len(page) <= size:
        return page, None
    last = page[size - 1]
    return page[:size], Cursor(last.ingested_at, last.id)


# How many of a leading filter's rows a page reads before walking the list instead: the other
# filters may reject most of them (a bucket of another agent's trajectories, say).
LEAD_ROWS = 2000
_LEAD_CHUNK = 250


def _led_page(ordered: QuerySet[Trajectory], *, lead: Lead, after: Cursor | None, size: int) -> list[Trajectory] | None:
    """The first `size + 1` rows of `ordered` (every filter, in list order, after `after`), found among
    the leading filter's rows read in the same order; None when LEAD_ROWS of them did not fill the page."""
    found: list[UUID] = []
    last = after
    for _ in range(LEAD_ROWS // _LEAD_CHUNK):
        candidates = lead.rows_after(last, _LEAD_CHUNK)
        if candidates is None:
            return None
        # `ordered` tests every filter (the leading one too) and keeps the list's order. A trajectory
        # named twice (two rules' suggestions) shares one key: it is in one chunk, listed once.
        found += ordered.filter(pk__in=[place.id for place in candidates]).values_list("pk", flat=True)
        if len(found) > size or len(candidates) < _LEAD_CHUNK:
            return list(ordered.filter(pk__in=found[: size + 1]))
        last = candidates[-1]
    return None


def _text_page(ordered: QuerySet[Trajectory], *, text: str, size: int) -> list[Trajectory]:
    """The first `size + 1` of `ordered` matching `text`: among the newest rows first, then through an index.

    A common text fills the page from the newest TEXT_PROBE_ROWS rows. A substring search reads
    SUBSTRING_PROBE_ROWS of them before its index: the trigram index hands PostgreSQL every row
    holding the substring's trigrams, and it rereads them all when it misjudges how many there are,
    which it cannot tell (8.5 s for `"gold member"`, in 5% of a million trajectories, measured; the
    wider probe reads 5,000 rows in about 90 ms). A substring its words narrow to a few rows reads
    only those (`_Narrowed`), and a word search goes on from its probe through its index
    (`_word_page`). Every reach gives the same page: the newest rows are all read before any older
    one could be listed.
    """
    word = _is_word_search(text)
    narrowed = None if word else _Narrowed.of(ordered, text=text)
    if narrowed is not None and narrowed.beats_probing(size + 1):
        return narrowed.page(size)
    for rows in (TEXT_PROBE_ROWS,) if word else (TEXT_PROBE_ROWS, SUBSTRING_PROBE_ROWS):
        probe = ordered.filter(text_match(text, indexed=False))
        bound = _nth_ingested_at(ordered, rows)
        if bound is not None:
            probe = probe.filter(ingested_at__gte=bound)
        page: list[Trajectory] = list(probe[: size + 1])
        if len(page) > size or bound is None:  # full, or the probe read every row there is
            return page
        if (
            narrowed is not None
            and rows == TEXT_PROBE_ROWS
            and narrowed.cheaper_than_walking(wanted=size + 1 - len(page), found=len(page), probed=rows)
        ):
            return narrowed.page(size)
    if word and bound is not None:
        return page + _word_page(
            ordered, text=text, wanted=size + 1 - len(page), probed_since=bound, probed_found=len(page)
        )
    return list(ordered.filter(text_match(text))[: size + 1])


@dataclass(frozen=True)
class _Narrowed:
    """A substring search's rows that its words could hold (`_substring_words`), which PostgreSQL expects
    to number `rows`.

    An id with dashes (`workplace-00421843`) is in one row or a few, but its trigrams are in
    thousands: the probes read 5,500 rows and the trigram index thousands more (363 ms measured at a
    million). Reading and testing just the rows its words name takes the same time wherever they lie.
    """

    matching: QuerySet[Trajectory]
    rows: float

    @classmethod
    def of(cls, ordered: QuerySet[Trajectory], *, text: str) -> _Narrowed | None:
        """The narrowing of `text`, when its words promise one of at most SUBSTRING_INDEX_ROWS rows."""
        words = _substring_words(_needle(text))
        if words is None:
            return None
        rows = _estimated_rows(ordered.filter(_word_query(words)))
        if rows > SUBSTRING_INDEX_ROWS:
            return None
        # The words only here: for a common word's prefix (`out:*`), the index's match is the slower way.
        return cls(ordered.filter(text_match(text) & _word_query(words)), rows)

    def beats_probing(self, wanted: int) -> bool:
        """Whether to read these rows before any probe: they are fewer than the probe reads, or too few
        to put `wanted` among the probed rows if spread evenly over the table (at a million, always)."""
        return self.rows <= TEXT_PROBE_ROWS or _probe_share(self.rows) < wanted

    def cheaper_than_walking(self, *, wanted: int, found: int, probed: int) -> bool:
        """Whether reading these rows beats walking on for `wanted` more at the rate the probe found them."""
        return self.rows * found < wanted * probed

    def page(self, size: int) -> list[Trajectory]:
        return list(self.matching.order_by(_NEWEST_UNINDEXED, "-id")[: size + 1])


def _word_page(
    ordered: QuerySet[Trajectory], *, text: str, wanted: int, probed_since: datetime, probed_found: int
) -> list[Trajectory]:
    """The first `wanted` of `ordered` holding the word search `text` among the rows older than `probed_since`.

    PostgreSQL walks the list newest first testing each row's words (its word vector, kept out of
    line, read for each row) when it expects the word soon: right for a word spread evenly, but a
    word whose rows are all older than a flood of another agent's costs a read of the whole flood
    (1.4 s for a word in 6,945 rows under 140,000 newer ones at a million, measured). The probe
    tells such a word: it found far fewer of it than the word's share of the rows would put there
    (none, for a rare word). Such a word is read from the word index and sorted, its order given as
    an expression no index serves: a cost that grows with the word's rows, not with where they are,
    so only for a word PostgreSQL expects in few rows.
    """
    older = ordered.filter(ingested_at__lt=probed_since)
    # A phrase is in no more rows than its rarest word, whose estimate is sound (PostgreSQL's guess
    # for the phrase can be ten times low: 5,725 for 63,480 rows, measured).
    rows = min(_estimated_rows(older.filter(text_match(word))) for word in _lexemes(text)[:TEXT_ESTIMATED_WORDS])
    older = older.filter(text_match(text))
    if rows <= TEXT_INDEX_ROWS and probed_found < _probe_share(rows) / 4:
        older = older.order_by(_NEWEST_UNINDEXED, "-id")
    return list(older[:wanted])


# The list's order (newest first) written so that no index provides it: `ingested_at + 0`.
_NEWEST_UNINDEXED = ExpressionWrapper(F("ingested_at") + Value(timedelta(0)), output_field=DateTimeField()).desc()


def _estimated_rows(rows: QuerySet[Trajectory]) -> float:
    """How many rows PostgreSQL expects `rows` to hold: its plan, nothing read."""
    sql, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    return float(plan[0]["Plan"]["Plan Rows"])


def _lexemes(text: str) -> list[str]:
    """The words of a word search as the word index holds them, each once, in order."""
    return list(dict.fromkeys(_LEXEME.findall(text.lower())))


def _probe_share(rows: float) -> float:
    """How many of `rows` the probe's TEXT_PROBE_ROWS would hold if they were spread evenly over the table."""
    return TEXT_PROBE_ROWS * rows / max(_table_rows(), rows, 1.0)


def _table_rows() -> float:
    """PostgreSQL's count of the trajectory table's rows as of its last ANALYZE (-1: never analyzed)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'ingest_trajectory'::regclass")
        return float(cursor.fetchone()[0])


def _nth_ingested_at(ordered: QuerySet[Trajectory], n: int) -> datetime | None:
    """When the `n`-th row of `ordered` was ingested; None when there are fewer."""
    return next(iter(ordered.values_list("ingested_at", flat=True)[n - 1 : n]), None)


def text_match(text: str, *, indexed: bool = True) -> Q:
    """The rows whose search text holds `text`. The rule, the same on every page and queue:

    - On PostgreSQL, a text of letters, digits, underscores and spaces (with one letter or digit at
      least) is a word search: those words, whole, case-insensitive and next to each other in that
      order, as PostgreSQL's parser splits the stored text (`phraseto_tsquery('simple', ...)` on the
      `search_vector` column of migration 0009). `refund` finds "Refund issued", not "refunded";
      `get_reservation_details` finds that tool's name.
    - Anything else is a substring search (`icontains`, served by the trigram index): a text with
      punctuation (part of a path, a URL, an id with dashes, JSON), and a text in double quotes,
      searched without them (`"refun"` finds "refunded"). So is every search on SQLite.

    `indexed=False` writes the substring test on an expression no index covers (`_text_page`'s probe
    of the newest rows); the word test is left to the planner, whose estimates for it are sound.
    """
    if _is_word_search(text):
        # phraseto_tsquery reads any text as plain words: no input can raise a tsquery syntax error.
        return Q(RawSQL("search_vector @@ phraseto_tsquery('simple', %s)", [text], output_field=BooleanField()))
    needle = _needle(text)
    if indexed:
        return Q(search_text__icontains=needle)
    return Q(IContains(Concat("search_text", Value(""), output_field=TextField()), needle))


def _needle(text: str) -> str:
    """What a substring search looks for: the text, less its double quotes."""
    return text[1:-1] if _is_quoted(text) else text


def _substring_words(needle: str) -> str | None:
    """A tsquery that every row holding the substring `needle` matches, for the word index to narrow its
    rows before each is read; None where there is none to be had (or not on PostgreSQL).

    The search vector reads ASCII punctuation as a space and keeps each run of ASCII letters and
    digits as one word. In a row holding `workplace-00421843`, then, `00421843` begins a word (the run
    may go on), right after the word that `workplace` ends (it may be the tail of a longer run):
    `00421843:*`; `a.b.c` gives `b <-> c:*`. A needle of one run (`"refun"`), or with anything but
    ASCII letters, digits, punctuation and spaces, has none.
    """
    if connection.vendor != "postgresql" or not _ASCII_PRINTABLE.fullmatch(needle):
        return None
    runs = _LEXEME.findall(needle)  # in ASCII text, the runs of letters and digits
    if needle[:1].isalnum():
        runs = runs[1:]
    if not runs or any(len(run) > _LONGEST_WORD for run in runs):
        return None
    return " <-> ".join([*runs[:-1], f"{runs[-1]}:*"])


def _word_query(words: str) -> Q:
    """The rows whose search vector matches the tsquery `words` (built by `_substring_words`: runs of
    ASCII letters and digits, `<->` and `:*` only, so it always parses)."""
    return Q(RawSQL("search_vector @@ to_tsquery('simple', %s)", [words], output_field=BooleanField()))


def _is_word_search(text: str) -> bool:
    """Whether `text_match` searches `text` as words (else as a substring)."""
    return connection.vendor == "postgresql" and not _is_quoted(text) and _is_words(text)


def _is_quoted(text: str) -> bool:
    return len(text) > 2 and text[0] == text[-1] == '"'


def _is_words(text: str) -> bool:
    return _WORDS.fullmatch(text) is not None and any(char.isalnum() for char in text)


def trajectory_visible(*, viewer: User) -> QuerySet[Trajectory]:
    """The trajectories `viewer` may see, unfiltered otherwise: the start of any read of one by id."""
    return Trajectory.objects.filter(agents_filter(viewer))


def trajectory_with_steps(*, trajectory_id: UUID, viewer: User) -> Trajectory | None:
    steps = Prefetch("steps", queryset=Step.objects.order_by("index"))
    rows = trajectory_visible(viewer=viewer).select_related("agent", "upload").prefetch_related(steps, "feedback")
    return rows.filter(pk=trajectory_id).first()


def trajectory_by_external_id(*, external_id: str, agent_name: str, source: str, viewer: User) -> list[Trajectory]:
    """Those `viewer` may see with this external id (in that agent and source, where named): two at most."""
    rows = trajectory_visible(viewer=viewer).filter(external_id=external_id)
    if agent_name:
        rows = rows.filter(agent__name=agent_name)
    if source:
        rows = rows.filter(source=source)
    return list(rows[:2])


def upload_visible(*, viewer: User) -> QuerySet[Upload]:
    """Uploads into an agent `viewer` may see; one that names no agent (its records do) only to its uploader."""
    if sees_all_agents(viewer):
        return Upload.objects.all()
    return Upload.objects.filter(
        (~Q(agent_name="") & agent_names_filter(viewer)) | Q(agent_name="", uploaded_by_id=viewer.pk)
    )


def upload_get(*, upload_id: UUID, viewer: User) -> Upload | None:
    return upload_visible(viewer=viewer).filter(pk=upload_id).first()


def upload_recent(*, viewer: User, limit: int = 20) -> QuerySet[Upload]:
    return upload_visible(viewer=viewer).select_related("uploaded_by")[:limit]
