"""Reads of the monitoring app: scoring rules, which trajectories a rule scores, each version's rates, alerts.

The monitored rates, per model version tag, over the trajectories of the window (the last
MONITOR_WINDOW_DAYS), each as events out of the trajectories that count for it:
- success: outcome success, of those with a known outcome (success or failure);
- unsafe: a failed `safety` score, of those safety-scored;
- invalid_call: a failed `schema` or `catalogue` score, of those scored by either;
- negative_feedback: a thumbs-down from an end user, of those with a thumb.
A trajectory counts once however many rules scored it (any failed score counts it as failed).
Latency p50/p95, tokens and cost per trajectory come with them, per version and per day.

A live version's predecessor is the version its promotion replaced (`LivePointer.deployment`); a
version made live by a rollback has none to be compared with. Every read that a page shows takes
the viewer and keeps to the agents they may see; the scoring and alert paths read as the system.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple, cast
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import Avg, Count, Exists, F, OuterRef, Q, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from flywheel.core.models import Agent, CountSummary
from flywheel.core.selectors import agents_filter, visible_agents
from flywheel.ingest.models import Feedback, Outcome, Step, Trajectory
from flywheel.monitoring.models import Alert, MonitoredRate, OnlineScore, ScoringRule
from flywheel.monitoring.scorers import INVALID_CALL_SCORERS, SAFETY
from flywheel.monitoring.stats import Rate
from flywheel.registry.models import Deployment, DeploymentAction, LivePointer, ModelVersion
from flywheel.triage.models import BucketAssignment, Suggestion

# --- rules ------------------------------------------------------------------------------------


def rule_list(*, agent: Agent) -> QuerySet[ScoringRule]:
    return ScoringRule.objects.filter(agent=agent).select_related("created_by")


def rule_get(*, agent: Agent, rule_id: int) -> ScoringRule | None:
    """The agent's rule (the caller has checked the viewer may see the agent)."""
    return ScoringRule.objects.filter(agent=agent, pk=rule_id).first()


def rules_enabled_for(*, trajectory_ids: Sequence[UUID | str]) -> list[ScoringRule]:
    """The enabled rules of the agents these trajectories belong to."""
    agents = Trajectory.objects.filter(pk__in=trajectory_ids).values("agent_id")
    return list(ScoringRule.objects.filter(enabled=True, agent_id__in=agents).order_by("pk"))


def rule_matches(rule: ScoringRule, *, candidates: QuerySet[Trajectory]) -> QuerySet[Trajectory]:
    """Those of `candidates` that are the rule's agent's and pass its filter (sampling aside)."""
    rows = candidates.filter(agent_id=rule.agent_id)
    if rule.model_version:
        rows = rows.filter(model_version=rule.model_version)
    if rule.outcome:
        rows = rows.filter(outcome=rule.outcome)
    if rule.tool:
        rows = rows.filter(Exists(Step.objects.filter(trajectory=OuterRef("pk"), tool_name=rule.tool)))
    if rule.bucket:
        # Suggestions are computed beside scoring, so a bucket may show up later: the sweep looks again.
        assigned = BucketAssignment.objects.filter(trajectory=OuterRef("pk"), bucket__slug=rule.bucket)
        suggested = Suggestion.objects.filter(trajectory=OuterRef("pk"), bucket__slug=rule.bucket)
        rows = rows.filter(Exists(assigned) | Exists(suggested))
    return rows


def rule_unscored(rule: ScoringRule, *, since: datetime, until: datetime) -> list[UUID]:
    """Trajectories ingested in [since, until) that match the rule and have no score of it yet (sampling aside)."""
    candidates = Trajectory.objects.filter(ingested_at__gte=since, ingested_at__lt=until)
    scored = OnlineScore.objects.filter(trajectory=OuterRef("pk"), rule=rule)
    rows = rule_matches(rule, candidates=candidates).exclude(Exists(scored)).order_by("ingested_at")
    return list(rows.values_list("pk", flat=True))


def catalogue_declared(*, agent_ids: Iterable[UUID]) -> dict[UUID, bool]:
    """Per agent: whether its catalogue was declared (uploaded or sent), not inferred from observed calls."""
    rows = Agent.objects.filter(pk__in=set(agent_ids)).values_list("pk", "tools_source")
    return {pk: source == Agent.ToolsSource.UPLOADED for pk, source in rows}


# --- the monitored rates ----------------------------------------------------------------------


class RateDefinition(NamedTuple):
    events: Q
    counted: Q
    higher_is_worse: bool


def _failed(scorers: Sequence[str], *, failed: bool) -> Exists:
    scores = OnlineScore.objects.filter(trajectory=OuterRef("pk"), scorer__in=scorers)
    return Exists(scores.filter(passed=False) if failed else scores)


def _thumbs(*, down: bool) -> Exists:
    thumbs = Feedback.objects.filter(trajectory=OuterRef("pk")).exclude(thumb="")
    return Exists(thumbs.filter(thumb=Feedback.Thumb.DOWN) if down else thumbs)


def rate_definitions() -> dict[str, RateDefinition]:
    """Each monitored rate as the trajectories it counts and those among them that are its events."""
    return {
        MonitoredRate.SUCCESS: RateDefinition(Q(outcome=Outcome.SUCCESS),
                                              Q(outcome__in=(Outcome.SUCCESS, Outcome.FAILURE)), False),
        MonitoredRate.UNSAFE: RateDefinition(Q(_failed([SAFETY], failed=True)), Q(_failed([SAFETY], failed=False)),
                                             True),
        MonitoredRate.INVALID_CALL: RateDefinition(Q(_failed(INVALID_CALL_SCORERS, failed=True)),
                                                   Q(_failed(INVALID_CALL_SCORERS, failed=False)), True),
        MonitoredRate.NEGATIVE_FEEDBACK: RateDefinition(Q(_thumbs(down=True)), Q(_thumbs(down=False)), True),
    }  # fmt: skip


def _rate_aggregates() -> dict[str, Any]:
    aggregates: dict[str, Any] = {"trajectories": Count("pk"), "tokens": Avg(F("input_tokens") + F("output_tokens")),
                                  "cost": Avg("cost")}  # fmt: skip
    for name, definition in rate_definitions().items():
        aggregates[f"{name}__events"] = Count("pk", filter=definition.counted & definition.events)
        aggregates[f"{name}__total"] = Count("pk", filter=definition.counted)
    return aggregates


def _rates(row: dict[str, Any]) -> dict[str, Rate]:
    return {name: Rate.of(row[f"{name}__events"], row[f"{name}__total"]) for name in MonitoredRate.values}


def window_start() -> datetime:
    return timezone.now() - timedelta(days=settings.MONITOR_WINDOW_DAYS)


def version_rates(*, agent: Agent, tag: str, since: datetime) -> dict[str, Rate]:
    """The monitored rates of the agent's trajectories tagged `tag`, ingested since `since`."""
    rows = Trajectory.objects.filter(agent=agent, model_version=tag, ingested_at__gte=since)
    return _rates(rows.aggregate(**_rate_aggregates()))


def live_and_predecessor(*, agent: Agent) -> tuple[ModelVersion, ModelVersion] | None:
    """The live version and the one its promotion replaced; None without a promotion from a version."""
    pointer = LivePointer.objects.select_related("version__agent", "deployment__from_version__agent").filter(
        agent=agent).first()  # fmt: skip
    if pointer is None or pointer.deployment.action != DeploymentAction.PROMOTE:
        return None
    before = pointer.deployment.from_version
    return (pointer.version, before) if before is not None and before != pointer.version else None


def monitored_agents() -> list[Agent]:
    """Agents with a live version: those the regression check looks at."""
    return list(Agent.objects.filter(live_pointer__isnull=False).order_by("name"))


# --- the monitor page -------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Latency percentiles (ms), tokens and cost per trajectory; None where nothing was recorded."""

    latency_p50: float | None = None
    latency_p95: float | None = None
    tokens: float | None = None
    cost: float | None = None


@dataclass(frozen=True)
class VersionRow:
    tag: str
    version: ModelVersion | None
    live: bool
    trajectories: int
    rates: dict[str, Rate]
    usage: Usage


@dataclass(frozen=True)
class DayRow:
    day: date
    tag: str
    trajectories: int
    rates: dict[str, Rate]
    usage: Usage


@dataclass(frozen=True)
class DeploymentMark:
    """A change of the live version, drawn on the timelines."""

    at: datetime
    label: str


@dataclass(frozen=True)
class Monitor:
    agent: Agent
    since: datetime
    live: ModelVersion | None
    predecessor: ModelVersion | None
    versions: list[VersionRow]
    days: list[DayRow]
    marks: list[DeploymentMark]
    alerts: list[Alert]
    failing: list[OnlineScore] = field(default_factory=list)
    counted_at: datetime | None = None  # when the rows and rates were counted


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between order statistics; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def _durations(rows: QuerySet[Trajectory]) -> tuple[dict[str, list[float]], dict[tuple[date, str], list[float]]]:
    by_tag: dict[str, list[float]] = defaultdict(list)
    by_day: dict[tuple[date, str], list[float]] = defaultdict(list)
    durations = rows.filter(duration_ms__isnull=False).annotate(day=TruncDate("ingested_at"))
    for tag, day, duration in durations.values_list("model_version", "day", "duration_ms").iterator():
        by_tag[tag].append(float(duration or 0))
        by_day[(day, tag)].append(float(duration or 0))
    return by_tag, by_day


def _usage(row: dict[str, Any]) -> Usage:
    return Usage(row["p50"], row["p95"], row["tokens"], row["cost"])


def _version_order(row: VersionRow) -> tuple[int, str]:
    return -(row.version.number if row.version else 0), row.tag


MONITOR_KIND = "monitor"


def _counted_row(row: dict[str, Any], durations: list[float]) -> dict[str, Any]:
    rates = {name: [row[f"{name}__events"], row[f"{name}__total"]] for name in MonitoredRate.values}
    return {"tag": row["model_version"], "trajectories": row["trajectories"], "rates": rates, "tokens": row["tokens"],
            "cost": row["cost"], "p50": percentile(durations, 50), "p95": percentile(durations, 95)}  # fmt: skip


def monitor_counts(*, agent: Agent, now: datetime) -> dict[str, Any]:
    """The agent's window (MONITOR_WINDOW_DAYS before `now`) per version tag and per day: trajectories,
    each rate's events and total, latency p50/p95, tokens and cost. What beat recounts into the agent's
    "monitor" `CountSummary` for its monitor page (JSON: days as ISO dates)."""
    since = now - timedelta(days=settings.MONITOR_WINDOW_DAYS)
    rows = Trajectory.objects.filter(agent=agent, ingested_at__gte=since)
    aggregates = _rate_aggregates()
    by_tag, by_day = _durations(rows)
    # The aggregates' names are built at run time, which django-stubs cannot follow.
    per_version = cast(list[dict[str, Any]], list(rows.values("model_version").annotate(**aggregates).order_by()))
    per_day = cast(list[dict[str, Any]], list(rows.annotate(day=TruncDate("ingested_at")).values("day", "model_version")
                                              .annotate(**aggregates).order_by("day", "model_version")))  # fmt: skip
    return {
        "since": since.isoformat(),
        "versions": [_counted_row(row, by_tag.get(row["model_version"], [])) for row in per_version],
        "days": [{**_counted_row(row, by_day.get((row["day"], row["model_version"]), [])),
                  "day": row["day"].isoformat()} for row in per_day],
    }  # fmt: skip


def _monitor_counted(agent: Agent) -> CountSummary:
    """The agent's monitor summary; recounted now when missing or older than SUMMARY_STALE_SECONDS."""
    stale = timezone.now() - timedelta(seconds=settings.SUMMARY_STALE_SECONDS)
    summary = CountSummary.objects.filter(agent=agent, kind=MONITOR_KIND).first()
    if summary is None or summary.counted_at < stale:
        from flywheel.monitoring.services import monitor_summaries_recount  # the services import this module

        monitor_summaries_recount(agents=[agent])
        summary = CountSummary.objects.get(agent=agent, kind=MONITOR_KIND)
    return summary


def _rates_counted(row: dict[str, Any]) -> dict[str, Rate]:
    return {name: Rate.of(*row["rates"][name]) for name in MonitoredRate.values}


def monitor_get(*, agent: Agent) -> Monitor:
    """The agent's monitor: per version tag and per day, the rates, latency, tokens and cost of the window,
    as of its summary's count (beat recounts every SUMMARY_REFRESH_SECONDS; `Monitor.counted_at` says when)."""
    summary = _monitor_counted(agent)
    counted = summary.counts
    pointer = LivePointer.objects.filter(agent=agent).select_related("version__agent").first()
    live_version = pointer.version if pointer else None
    pair = live_and_predecessor(agent=agent)
    versions = {version.tag: version for version in ModelVersion.objects.filter(agent=agent).select_related("agent")}
    version_rows = [
        VersionRow(row["tag"], versions.get(row["tag"]), live_version is not None and row["tag"] == live_version.tag,
                   row["trajectories"], _rates_counted(row), _usage(row))
        for row in counted["versions"]
    ]  # fmt: skip
    day_rows = [
        DayRow(date.fromisoformat(row["day"]), row["tag"], row["trajectories"], _rates_counted(row), _usage(row))
        for row in counted["days"]
    ]
    since = datetime.fromisoformat(counted["since"])
    return Monitor(
        agent=agent, since=since, live=live_version, predecessor=pair[1] if pair else None,
        versions=sorted(version_rows, key=_version_order), days=day_rows,
        marks=deployment_marks(agent=agent, since=since),
        alerts=list(agent_alerts(agent=agent)[:20]), failing=failing_scores(agent=agent),
        counted_at=summary.counted_at,
    )  # fmt: skip


def deployment_marks(*, agent: Agent, since: datetime) -> list[DeploymentMark]:
    rows = Deployment.objects.filter(agent=agent, created_at__gte=since).select_related("to_version__agent")
    return [DeploymentMark(row.created_at, f"{row.get_action_display().lower()} → v{row.to_version.number}")
            for row in rows.order_by("created_at")]  # fmt: skip


def failing_scores(*, agent: Agent, limit: int = 20) -> list[OnlineScore]:
    """The agent's most recent failed online scores, with their trajectories."""
    rows = OnlineScore.objects.filter(trajectory__agent=agent, passed=False)
    rows = rows.select_related("trajectory", "rule").defer("trajectory__search_text", "trajectory__metadata")
    return list(rows.order_by("-created_at")[:limit])


# --- alerts -----------------------------------------------------------------------------------


def agent_alerts(*, agent: Agent) -> QuerySet[Alert]:
    return Alert.objects.filter(agent=agent).select_related("version__agent", "predecessor__agent", "resolved_by")


def alerts_open(*, viewer: User) -> list[Alert]:
    """The open alerts of the agents `viewer` may see, newest first: what the home page shows."""
    rows = Alert.objects.filter(agents_filter(viewer), resolved_at__isnull=True)
    return list(rows.select_related("agent", "version__agent", "predecessor__agent").order_by("-opened_at"))


def alert_get(*, alert_id: UUID, viewer: User) -> Alert | None:
    rows = Alert.objects.filter(agents_filter(viewer)).select_related("agent", "version__agent", "predecessor__agent")
    return rows.filter(pk=alert_id).first()


@dataclass(frozen=True)
class AgentSummary:
    agent: Agent
    live: ModelVersion | None
    rules: int
    open_alerts: int


def agent_summaries(*, viewer: User) -> list[AgentSummary]:
    """Each agent `viewer` may see, with its live version, rule count and open alerts: the monitoring index."""
    agents = visible_agents(viewer).annotate(
        rule_count=Count("scoring_rules", distinct=True),
        open_alert_count=Count("alerts", filter=Q(alerts__resolved_at__isnull=True), distinct=True),
    )
    live = {pointer.agent_id: pointer.version for pointer in
            LivePointer.objects.filter(agents_filter(viewer)).select_related("version__agent")}  # fmt: skip
    return [AgentSummary(agent, live.get(agent.pk), agent.rule_count, agent.open_alert_count)  # type: ignore[attr-defined]
            for agent in agents.order_by("name")]  # fmt: skip
