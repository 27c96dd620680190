"""Writes of the monitoring app: scoring rules, online scores, regression alerts and the rollback from one.

Online scoring runs off ingest's path: `on_trajectories_stored` (connected in `MonitoringConfig.ready`)
hands the stored ids to a task on the `default` queue after commit, and never raises into ingest.
`scores_compute` scores each trajectory with every enabled rule of its agent that matches and samples
it, and stores each verdict once (the unique (trajectory, scorer, rule) makes a second run add
nothing). It then asks for a regression check of the agents it scored (at most one per agent per
MONITOR_CHECK_DELAY_SECONDS) and, after commit, sends `signals.online_scores_stored` (triage's queue
rules on online scores listen). `scoring_sweep` (beat)
scores recent trajectories that a lost message, a broker outage or a new rule left unscored.

The `judge` scorer loads a model, so a sampled trajectory becomes a `JudgeRequest` instead of a
verdict: `judge_requests_send` sends an agent's waiting requests to one `judge` job on the gpu
queue (one job of an agent at a time, so requests gather into batches while one runs), and
`on_job_finished` stores its judgements as online scores, puts requests of a failed job back to
wait (at most MONITOR_JUDGE_ATTEMPTS jobs each), and sends what waited meanwhile.

`monitor_check` compares the live version with its predecessor on each monitored rate and opens an
alert (audited) where the live one is significantly worse; an open alert is refreshed, never
doubled. Alerts of a version that is no longer live are resolved by the next check;
`alert_rollback` rolls back through the registry and resolves the version's alerts in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from flywheel.core.models import Agent
from flywheel.core.services import Actor, actor_user, audit_record, recount_once, summaries_store
from flywheel.datasets.conversion import steps_messages
from flywheel.ingest.models import Step, Trajectory
from flywheel.monitoring import scorers, selectors
from flywheel.monitoring.models import Alert, JudgeRequest, JudgeRequestState, OnlineScore, ScoringRule
from flywheel.monitoring.signals import online_scores_stored
from flywheel.monitoring.stats import Rate, worse_p_value
from flywheel.registry.models import Deployment, ModelVersion
from flywheel.registry.services import version_rollback
from flywheel.rewards.judge_jobs import judge_job_launch
from flywheel.training.models import Job, JobKind, JobState
from flywheel.training.services import LaunchRefused
from flywheel.triage.services import trace_facts
from flywheel.triage.suggestions import TraceFacts
from trainer.contracts import ContractError, read_json_lines
from trainer.verifiers.judge import JudgeItem

logger = logging.getLogger(__name__)


class MonitoringRefused(ValueError):
    """The request cannot be carried out; the message says why, and nothing was changed."""


# --- rules ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleFields:
    """What a person sets on a scoring rule."""

    name: str
    model_version: str = ""
    outcome: str = ""
    tool: str = ""
    bucket: str = ""
    sample_rate: float = 1.0
    scorers: tuple[str, ...] = (scorers.SAFETY, scorers.SCHEMA, scorers.CATALOGUE)
    enabled: bool = True


def _rule_save(rule: ScoringRule, fields: RuleFields) -> ScoringRule:
    for name, value in asdict(fields).items():
        setattr(rule, name, list(value) if name == "scorers" else value)
    rule.full_clean()
    rule.save()
    return rule


@transaction.atomic
def rule_create(*, actor: Actor, agent: Agent, fields: RuleFields) -> ScoringRule:
    rule = _rule_save(ScoringRule(agent=agent, created_by=actor_user(actor)), fields)
    audit_record(actor=actor, action="scoring_rule.create", target=rule, data={"agent": agent.name, **asdict(fields)})
    return rule


@transaction.atomic
def rule_update(*, actor: Actor, rule: ScoringRule, fields: RuleFields) -> ScoringRule:
    """Change a rule; scores it stored stay (they were right under the rule as it was)."""
    _rule_save(rule, fields)
    audit_record(actor=actor, action="scoring_rule.update", target=rule,
                 data={"agent": rule.agent.name, **asdict(fields)})  # fmt: skip
    return rule


@transaction.atomic
def rule_delete(*, actor: Actor, rule: ScoringRule) -> None:
    """Delete a rule; its scores stay, counted by the monitor, with no rule named."""
    audit_record(actor=actor, action="scoring_rule.delete", target=rule, data={"agent": rule.agent.name})
    rule.delete()


# --- online scoring ---------------------------------------------------------------------------


def on_trajectories_stored(sender: object, trajectory_ids: list[UUID], **kwargs: Any) -> None:
    """`ingest.signals.trajectories_stored` receiver: schedule their scoring; never raises into ingest.

    Ingest sends the signal after its commit; anything that goes wrong here is logged, and the
    beat's `scoring_sweep` scores what was missed.
    """
    try:
        scoring_schedule(trajectory_ids=trajectory_ids)
    except Exception:  # the database or the broker: ingest has stored its rows, scoring catches up
        logger.exception("online scoring of %d stored trajectories was not scheduled", len(trajectory_ids))


def scoring_schedule(*, trajectory_ids: Iterable[UUID | str | None]) -> bool:
    """Score these trajectories on the `default` queue after commit, when an enabled rule could apply."""
    from flywheel.monitoring.tasks import score_trajectories

    ids = [str(pk) for pk in trajectory_ids if pk is not None]
    if not ids or not ScoringRule.objects.filter(enabled=True, agent__trajectories__pk__in=ids).exists():
        return False
    transaction.on_commit(lambda: score_trajectories.delay(ids), robust=True)
    return True


def _facts(trajectory_ids: Sequence[UUID]) -> dict[UUID, TraceFacts]:
    """Triage's facts of each trajectory; an inferred catalogue counts as none (it holds every called tool)."""
    facts = trace_facts(trajectory_ids)
    agents = dict(Trajectory.objects.filter(pk__in=list(facts)).values_list("pk", "agent_id"))
    declared = selectors.catalogue_declared(agent_ids=agents.values())
    return {pk: item if declared.get(agents[pk]) else replace(item, tools=()) for pk, item in facts.items()}


def _verdicts(rule: ScoringRule, trajectory_id: UUID, facts: TraceFacts) -> list[OnlineScore]:
    rows = []
    for name in rule.scorers:
        if name == scorers.JUDGE:
            continue  # a judge request instead (`_judge_requests_add`)
        verdict = scorers.score(name, facts)
        if verdict is not None:
            row = OnlineScore(trajectory_id=trajectory_id, rule=rule, scorer=name, value=verdict.value,
                              passed=verdict.passed, detail=verdict.detail)  # fmt: skip
            row.full_clean(exclude=["trajectory", "rule"], validate_unique=False, validate_constraints=False)
            rows.append(row)
    return rows


def scores_compute(*, trajectory_ids: Iterable[UUID | str]) -> int:
    """Score the trajectories under every enabled rule of their agents that matches and samples them.

    Returns the verdicts computed; each is stored once whatever the number of runs (a verdict
    already stored is skipped). Ids of trajectories that are gone are ignored. Asks for a
    regression check of each agent scored, after commit.
    """
    ids = [UUID(str(pk)) for pk in trajectory_ids]
    picked: list[tuple[ScoringRule, list[UUID]]] = []
    for rule in selectors.rules_enabled_for(trajectory_ids=ids):
        matched = selectors.rule_matches(rule, candidates=Trajectory.objects.filter(pk__in=ids))
        chosen = [pk for pk in matched.values_list("pk", flat=True)
                  if scorers.sampled(rule_id=rule.pk, trajectory_id=pk, rate=rule.sample_rate)]  # fmt: skip
        if chosen:
            picked.append((rule, chosen))
    facts = _facts(sorted({pk for _, chosen in picked for pk in chosen}))
    rows = [row for rule, chosen in picked for pk in chosen if pk in facts for row in _verdicts(rule, pk, facts[pk])]
    OnlineScore.objects.bulk_create(rows, ignore_conflicts=True)
    _judge_requests_add([(rule, [pk for pk in chosen if pk in facts]) for rule, chosen in picked
                         if scorers.JUDGE in rule.scorers])  # fmt: skip
    checks_schedule(agent_ids={rule.agent_id for rule, _ in picked})
    _scored_announce(sorted({row.trajectory_id for row in rows}))
    return len(rows)


def _scored_announce(trajectory_ids: list[UUID]) -> None:
    """Send `online_scores_stored` once the verdicts are committed; a failing receiver never fails the scoring.

    A signal, not a call: triage's queue rules read the scores, and monitoring need not know who does.
    (A lambda, not a functools.partial: Django names a robust callback that failed by its `__qualname__`.)
    """
    if trajectory_ids:
        transaction.on_commit(lambda: online_scores_stored.send(sender=OnlineScore, trajectory_ids=trajectory_ids),
                              robust=True)  # fmt: skip


def scoring_sweep() -> int:
    """Score recent trajectories that an enabled rule samples but has not scored; returns how many.

    Those ingested in the last MONITOR_SCORE_SWEEP_HOURS, and longer ago than DISPATCH_RESEND_SECONDS
    (their own message has had its time), at most DISPATCH_SWEEP_LIMIT per run. The candidates of a
    rule are read as ids and sampled here, so a low sample rate costs a read of the window's ids.
    """
    now = timezone.now()
    since, until = now - timedelta(hours=settings.MONITOR_SCORE_SWEEP_HOURS), now - timedelta(
        seconds=settings.DISPATCH_RESEND_SECONDS)  # fmt: skip
    pending: set[UUID] = set()
    for rule in ScoringRule.objects.filter(enabled=True).order_by("pk"):
        pending.update(pk for pk in selectors.rule_unscored(rule, since=since, until=until)
                       if scorers.sampled(rule_id=rule.pk, trajectory_id=pk, rate=rule.sample_rate))  # fmt: skip
    chosen = sorted(pending)[: settings.DISPATCH_SWEEP_LIMIT]
    return scores_compute(trajectory_ids=chosen) if chosen else 0


# --- the LLM judge as a scorer -------------------------------------------------------------------


def _judge_requests_add(picked: list[tuple[ScoringRule, list[UUID]]]) -> None:
    """A request per (rule, trajectory) not asked before; the agents that got one send them after commit."""
    requests = [JudgeRequest(rule=rule, trajectory_id=pk) for rule, chosen in picked for pk in chosen]
    if not requests:
        return
    JudgeRequest.objects.bulk_create(requests, ignore_conflicts=True)
    agent_ids = sorted({rule.agent_id for rule, _ in picked})
    transaction.on_commit(lambda: _judge_requests_send_all(agent_ids), robust=True)


def _judge_requests_send_all(agent_ids: Iterable[UUID]) -> None:
    for agent in Agent.objects.filter(pk__in=list(agent_ids)).order_by("pk"):
        judge_requests_send(agent=agent)


def _judge_items(requests: Sequence[JudgeRequest]) -> list[dict[str, Any]]:
    """Each request's trajectory as a judge item (the whole conversation, no separate answer), by request id."""
    steps: dict[UUID, list[Step]] = {}
    for step in Step.objects.filter(trajectory_id__in={r.trajectory_id for r in requests}).order_by("index"):
        steps.setdefault(step.trajectory_id, []).append(step)
    items = []
    for request in requests:
        messages = steps_messages(steps.get(request.trajectory_id, []))
        if messages:
            items.append(JudgeItem(id=str(request.pk), messages=messages).to_json())
    return items


@transaction.atomic
def judge_requests_send(*, agent: Agent) -> Job | None:
    """Send the agent's waiting judge requests (at most MONITOR_JUDGE_BATCH) in one judge job on the gpu queue.

    None while one of the agent's judge jobs for online scoring is still out (its end sends what waited
    meanwhile), or when nothing waits. A request whose trajectory has no message to judge is closed as
    unreadable; a launch the training app refuses leaves the requests waiting and is logged.
    """
    Agent.objects.select_for_update().filter(pk=agent.pk).first()  # one sender per agent at a time
    requests = JudgeRequest.objects.filter(rule__agent=agent)
    if requests.filter(state=JudgeRequestState.SENT).exists():
        return None
    waiting = list(requests.filter(state=JudgeRequestState.WAITING).select_related("rule__created_by")
                   [: settings.MONITOR_JUDGE_BATCH])  # fmt: skip
    items = _judge_items(waiting)
    sent = {int(item["id"]) for item in items}
    JudgeRequest.objects.filter(pk__in=[r.pk for r in waiting if r.pk not in sent]).update(
        state=JudgeRequestState.UNREADABLE)
    if not items:
        return None
    # The job is launched on behalf of whoever made the judging rule (a job names the person who asked for it).
    launcher = next((r.rule.created_by for r in waiting if r.rule.created_by is not None), None)
    if launcher is None:
        logger.error("the online judge of %s was not launched: its judging rules name no one who made them", agent)
        return None
    try:
        job = judge_job_launch(actor=launcher, agent=agent, items=items)
    except LaunchRefused as error:
        logger.error("the online judge of %s was not launched: %s", agent, error)
        return None
    JudgeRequest.objects.filter(pk__in=sent).update(job=job, state=JudgeRequestState.SENT,
                                                    attempts=F("attempts") + 1)  # fmt: skip
    return job


def judge_scores_store(*, job: Job) -> int:
    """Store a finished judge job's judgements of online requests as `judge` scores, once; how many were stored.

    A failed or cancelled job puts its requests back to wait, up to MONITOR_JUDGE_ATTEMPTS jobs each.
    """
    requests = {r.pk: r for r in JudgeRequest.objects.select_for_update().filter(job=job, state=JudgeRequestState.SENT)}
    if not requests:
        return 0
    if job.state != JobState.SUCCEEDED:
        retried = [pk for pk, r in requests.items() if r.attempts < settings.MONITOR_JUDGE_ATTEMPTS]
        JudgeRequest.objects.filter(pk__in=retried).update(state=JudgeRequestState.WAITING, job=None)
        JudgeRequest.objects.filter(pk__in=set(requests) - set(retried)).update(state=JudgeRequestState.FAILED)
        return 0
    rows, unreadable = [], []
    for line in read_json_lines(job.result["results"]):
        request = requests.get(int(line["id"]))
        if request is None:
            continue
        if line["score"] is None:
            unreadable.append(request.pk)
            continue
        detail = {"score": line["score"], "reason": line["reason"], "job": str(job.pk)}
        rows.append(OnlineScore(trajectory_id=request.trajectory_id, rule_id=request.rule_id, scorer=scorers.JUDGE,
                                value=float(line["score"]), passed=bool(line["passed"]), detail=detail))  # fmt: skip
    OnlineScore.objects.bulk_create(rows, ignore_conflicts=True)
    JudgeRequest.objects.filter(pk__in=unreadable).update(state=JudgeRequestState.UNREADABLE)
    JudgeRequest.objects.filter(pk__in=requests).exclude(pk__in=unreadable).update(state=JudgeRequestState.SCORED)
    _scored_announce(sorted({row.trajectory_id for row in rows}))
    return len(rows)


def on_job_finished(sender: object, job: Job, **kwargs: Any) -> None:
    """`training.signals.job_finished` receiver: an online judge job's scores stored, the next batch sent."""
    if job.kind != JobKind.JUDGE or job.agent_id is None:
        return
    try:
        with transaction.atomic():
            judge_scores_store(job=job)
    except (OSError, KeyError, ValueError, TypeError, ContractError) as error:
        audit_record(actor=None, action="monitoring.judge_store_failed", target=job, data={"error": str(error)[:1000]})
        JudgeRequest.objects.filter(job=job, state=JudgeRequestState.SENT).update(state=JudgeRequestState.FAILED)
    agent_id = job.agent_id
    transaction.on_commit(lambda: _judge_requests_send_all([agent_id]), robust=True)


# --- regression alerts ------------------------------------------------------------------------


def checks_schedule(*, agent_ids: Iterable[UUID]) -> None:
    """Check these agents for a regression on the `default` queue, after commit (`check_later`)."""
    for agent_id in sorted(set(agent_ids)):

        def check(agent_id: UUID = agent_id) -> None:  # one callback per agent: one failing spares the others
            check_later(agent_id=agent_id)

        transaction.on_commit(check, robust=True)


def check_later(*, agent_id: UUID) -> bool:
    """Send the agent's check MONITOR_CHECK_DELAY_SECONDS from now, unless one is already on its way.

    A check aggregates the window's trajectories of two versions: run per scoring batch, a busy agent
    would pay that per batch. The first batch of a period sends it, delayed so it sees the batches
    that follow; those send nothing (a cache key marks the period). A cache that fails lets it through.
    """
    from flywheel.monitoring.tasks import check_agent

    delay = settings.MONITOR_CHECK_DELAY_SECONDS
    try:
        first = delay == 0 or cache.add(f"monitoring:check:{agent_id}", True, timeout=delay)
    except Exception:  # the cache is an optimisation here, never a reason to skip a check
        logger.warning("the check of agent %s was not debounced: the cache failed", agent_id, exc_info=True)
        first = True
    if first:
        check_agent.apply_async(args=(str(agent_id),), countdown=delay)
    return first


def monitor_check(*, agent: Agent) -> list[Alert]:
    """Compare the live version with its predecessor on each monitored rate; the alerts open for it now.

    A rate is compared when both versions have MONITOR_MIN_SAMPLES trajectories counting for it;
    the live version is worse when the one-sided two-proportion test gives p < MONITOR_ALPHA. Checks
    of one agent run one at a time (a lock on the agent row), so two never open the same alert twice.
    """
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=agent.pk)
        pair = selectors.live_and_predecessor(agent=agent)
        _alerts_resolve_stale(agent=agent, live=pair[0] if pair else None)
        if pair is None:
            return []
        live, before = pair
        since = selectors.window_start()
        now_rates = selectors.version_rates(agent=agent, tag=live.tag, since=since)
        before_rates = selectors.version_rates(agent=agent, tag=before.tag, since=since)
        opened = []
        for name, definition in selectors.rate_definitions().items():
            current, earlier = now_rates[name], before_rates[name]
            if min(current.total, earlier.total) < settings.MONITOR_MIN_SAMPLES:
                continue
            p_value = worse_p_value(live=current, before=earlier, higher_is_worse=definition.higher_is_worse)
            if p_value < settings.MONITOR_ALPHA:
                opened.append(_alert_open(agent, live, before, name, current, earlier, p_value))
        return opened


def _alert_open(agent: Agent, live: ModelVersion, before: ModelVersion, rate: str, current: Rate, earlier: Rate,
                p_value: float) -> Alert:  # fmt: skip
    """The open alert of (agent, live, rate) with these numbers: refreshed when open, else opened and audited."""
    alert = Alert.objects.filter(agent=agent, version=live, rate=rate, resolved_at__isnull=True).first()
    created = alert is None
    alert = alert or Alert(agent=agent, version=live, predecessor=before, rate=rate)
    alert.live_events, alert.live_total = current.events, current.total
    alert.predecessor_events, alert.predecessor_total = earlier.events, earlier.total
    alert.p_value = p_value
    alert.full_clean()
    alert.save()
    if created:
        audit_record(actor=None, action="monitoring.alert_open", target=alert, data={
            "agent": agent.name, "version": live.tag, "predecessor": before.tag, "rate": rate, "p_value": p_value,
            "live": [current.events, current.total], "predecessor_counts": [earlier.events, earlier.total],
        })  # fmt: skip
    return alert


def _alerts_resolve(alerts: Iterable[Alert], *, actor: Actor, resolution: str,
                    rollback: Deployment | None = None) -> list[Alert]:  # fmt: skip
    resolved = []
    for alert in alerts:
        alert.resolved_at, alert.resolved_by = timezone.now(), actor_user(actor)
        alert.resolution, alert.rollback = resolution, rollback
        alert.full_clean()
        alert.save()
        data = {"agent": alert.agent.name, "version": alert.version.tag, "resolution": resolution}
        audit_record(actor=actor, action="monitoring.alert_resolve", target=alert, data=data)
        resolved.append(alert)
    return resolved


def _alerts_resolve_stale(*, agent: Agent, live: ModelVersion | None) -> list[Alert]:
    """Resolve open alerts of versions no longer live (rolled back on the registry's page, or replaced)."""
    stale = Alert.objects.filter(agent=agent, resolved_at__isnull=True).exclude(version=live).select_related(
        "agent", "version__agent")  # fmt: skip
    return _alerts_resolve(stale, actor=None, resolution="the version is no longer live")


@transaction.atomic
def alert_rollback(*, actor: Actor, alert: Alert, reason: str) -> Deployment | None:
    """Roll the alert's agent back to the predecessor (a reason is required) and resolve the version's alerts.

    Refused (MonitoringRefused, or the registry's own refusal) when the alert is resolved already or
    the live version changed since it was raised. None when the predecessor is live already.
    """
    agent = Agent.objects.select_for_update().get(pk=alert.agent_id)  # the agent first, as monitor_check locks
    alert = Alert.objects.select_related("agent", "version__agent", "predecessor__agent").get(pk=alert.pk)
    if not alert.is_open:
        raise MonitoringRefused(f"this alert was resolved already ({alert.resolution})")
    deployment = version_rollback(actor=actor, agent=agent, reason=reason, to_version=alert.predecessor,
                                  expected_live=alert.version)  # fmt: skip
    open_alerts = Alert.objects.filter(agent=agent, version=alert.version, resolved_at__isnull=True).select_related(
        "agent", "version__agent")  # fmt: skip
    _alerts_resolve(open_alerts, actor=actor, resolution=f"rolled back to {alert.predecessor.tag}", rollback=deployment)
    return deployment


def monitor_sweep() -> int:
    """Beat: score what was missed, send waiting judge requests, then check every agent with a live version."""
    scoring_sweep()
    _judge_requests_send_all(JudgeRequest.objects.filter(state=JudgeRequestState.WAITING)
                             .values_list("rule__agent", flat=True).distinct())  # fmt: skip
    return sum(len(monitor_check(agent=agent)) for agent in selectors.monitored_agents())


def monitor_summaries_recount(*, agents: Iterable[Agent] | None = None) -> int:
    """Recount the monitor pages' summaries (of every agent by default; beat's `summaries_recount`), each
    agent's in its own transaction and once at a time (`recount_once`: a recount of that agent's already
    running is waited for). Returns how many agents were recounted."""
    recounted = 0
    for agent in Agent.objects.all() if agents is None else agents:

        def recount(agent: Agent = agent) -> None:
            with transaction.atomic():
                now = timezone.now()
                counts = {agent.pk: selectors.monitor_counts(agent=agent, now=now)}
                summaries_store(kind=selectors.MONITOR_KIND, counts=counts, counted_at=now, agent_ids=[agent.pk])

        recount_once(f"{selectors.MONITOR_KIND}:{agent.pk}", recount)
        recounted += 1
    return recounted
