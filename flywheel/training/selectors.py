"""Reads of the training app: job lists, a job's metric series, samples, its evaluation."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import QuerySet

from flywheel.training.models import Job, MetricPoint, Sample


def job_list(*, kind: str = "", state: str = "", agent: str = "", launched_by: str = "") -> QuerySet[Job]:
    jobs = Job.objects.select_related("snapshot", "agent", "launched_by")
    for field, value in (
        ("kind", kind),
        ("state", state),
        ("agent__name", agent),
        ("launched_by__username", launched_by),
    ):
        if value:
            jobs = jobs.filter(**{field: value})
    return jobs


def metric_series(*, job: Job) -> dict[str, list[tuple[int, float]]]:
    """Every metric's (step, value) points in step order, latest attempt first in case of retries."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    points = MetricPoint.objects.filter(job=job, attempt=job.attempts).order_by("name", "step", "id")
    for name, step, value in points.values_list("name", "step", "value"):
        series[name].append((step, value))
    return dict(series)


def latest_metrics(*, job: Job) -> dict[str, float]:
    return {name: points[-1][1] for name, points in metric_series(job=job).items()}


def job_samples(*, job: Job, min_reward: float | None = None, max_reward: float | None = None) -> QuerySet[Sample]:
    samples = Sample.objects.filter(job=job)
    if min_reward is not None:
        samples = samples.filter(reward__gte=min_reward)
    if max_reward is not None:
        samples = samples.filter(reward__lte=max_reward)
    return samples.order_by("-step", "reward")
