"""The job pages: the live page and its JSON and partials, samples, compare, the evaluation page.

Rows are created directly (no worker): what a running job would have stored by now.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.urls import reverse

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.training.forms import DEFAULT_HYPERPARAMETERS, JobLaunchForm
from flywheel.training.models import EvalRun, Job, MetricPoint, Sample
from trainer.spec.config import config_from_json
from trainer.spec.grpo import GrpoConfig

pytestmark = pytest.mark.django_db


def make_job(snapshot, *, kind: str = "grpo", state: str = "running", **fields: Any) -> Job:
    fields.setdefault("attempts", 1)
    return Job.objects.create(kind=kind, snapshot=snapshot, base_model="demo", state=state, **fields)


def add_points(job: Job, metrics: dict[str, list[float]], attempt: int | None = None) -> None:
    MetricPoint.objects.bulk_create(
        MetricPoint(job=job, attempt=attempt or job.attempts, step=step, name=name, value=value)
        for name, values in metrics.items()
        for step, value in enumerate(values, start=1)
    )


def add_sample(job: Job, step: int, reward: float, **components: float) -> Sample:
    return Sample.objects.create(job=job, step=step, task_id=f"task-{step}-{reward}", prompt="book a flight",
                                 completion=f"<tool_call>{step}</tool_call>", reward=reward,
                                 components=components)  # fmt: skip


def embedded_figure(page: str, element_id: str) -> dict[str, Any]:
    """The figure a page embeds with json_script under `element_id`."""
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', page, re.S)
    assert match, f"no #{element_id} in the page"
    figure: dict[str, Any] = json.loads(match.group(1))
    return figure


def rate(value: float | None, low: float | None = None, high: float | None = None, n: int = 5, **extra: Any):
    return {"value": value, "low": low, "high": high, "n": n, **extra}


RATES = {
    "tasks": 5,
    "valid_json_rate": rate(0.8, 0.4, 1.0),
    "correct_tool_rate": rate(0.6, 0.2, 1.0),
    "correct_arguments_rate": rate(0.4, 0.0, 0.8),
    "execution_success_rate": rate(None, n=0, note="no environment ran the calls"),
    "unsafe_action_rate": rate(0.0, 0.0, 0.0),
    "mean_reward": rate(0.52, 0.3, 0.74),
    "latency_p95_s": 0.31,
}


@pytest.fixture
def eval_run(tiny_snapshot) -> EvalRun:
    job = make_job(tiny_snapshot, kind="eval", state="succeeded")
    per_bucket = {
        "wrong_tool": {**RATES, "tasks": 3, "correct_arguments_rate": rate(0.333, 0.0, 1.0, n=3)},
        "bad_arguments": {**RATES, "tasks": 2, "correct_arguments_rate": rate(0.5, 0.0, 1.0, n=2)},
    }
    results = [{"task_id": f"task-{number}", "bucket": "wrong_tool", "valid_json": True, "correct_tool": True,
                "correct_arguments": number % 2 == 0, "execution_success": None, "unsafe_action": False,
                "violations": [], "reward": 0.5, "latency_s": 0.2, "output": "{}",
                "verdict": {"reason": f"reason for task {number}"}} for number in range(5)]  # fmt: skip
    recommendation = {"method": "grpo", "reason": "sometimes right but unreliable", "evidence": {}}
    return EvalRun.objects.create(job=job, snapshot=tiny_snapshot, model_label="demo", metrics=RATES,
                                  per_bucket=per_bucket, results=results, recommendation=recommendation)  # fmt: skip


# --- The live page -----------------------------------------------------------------------------


def test_the_live_page_highlights_the_trainers_flags_and_holds_the_charts_container(
    client, make_user, tiny_train_snapshot
):
    job = make_job(
        tiny_train_snapshot, log_tail="step 5\nflag: reward_hacking training reward rose while held-out fell\n"
    )
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_detail", args=[job.id])).content.decode()
    assert 'data-flag="reward_hacking"' in page and "Reward hacking" in page
    assert "training reward rose while held-out fell" in page
    assert (
        f'id="job-charts" class="charts job-charts" data-url="{reverse("training:job_chart", args=[job.id])}"' in page
    )
    assert 'id="job-log"' in page and 'id="job-samples"' in page


def test_the_live_page_shows_the_task_lines_the_trainer_skipped(client, make_user, tiny_train_snapshot):
    skipped = {"count": 7, "first": [{"file": "train.jsonl", "line": 12,
                                      "reason": "expected call record: argument 'bank_hours_start' must be a "
                                                "non-empty list of accepted values"}]}  # fmt: skip
    job = make_job(tiny_train_snapshot, kind="sft", state="succeeded",
                   result={"event": "done", "metrics": {"steps": 3, "skipped_tasks": skipped}})
    clean = make_job(tiny_train_snapshot, kind="sft", state="succeeded",
                     result={"event": "done", "metrics": {"steps": 3, "skipped_tasks": {"count": "many"}}})
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_detail", args=[job.id])).content.decode()
    assert 'data-skipped-tasks="7"' in page and "7 task lines skipped" in page
    assert "<code>train.jsonl:12</code> expected call record: argument &#x27;bank_hours_start&#x27;" in page
    assert "and 6 more" in page
    assert "data-skipped-tasks" not in client.get(reverse("training:job_detail", args=[clean.id])).content.decode()


def test_the_live_page_shows_progress_against_the_planned_steps(client, make_user, tiny_train_snapshot):
    job = make_job(tiny_train_snapshot, hyperparameters={"max_steps": 40})
    add_points(job, {"reward/mean": [0.1] * 10})
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_detail", args=[job.id])).content.decode()
    assert "10 of 40 steps" in page and 'aria-valuenow="25"' in page


def test_the_live_partial_polls_while_running_and_brings_the_log_out_of_band(client, make_user, tiny_train_snapshot):
    job = make_job(tiny_train_snapshot, log_tail="loading the model")
    client.force_login(make_user(Role.VIEWER))
    live = client.get(reverse("training:job_live", args=[job.id])).content.decode()
    assert 'hx-trigger="every 2s"' in live
    assert 'id="job-log" class="job-log" hx-swap-oob="true"' in live and "loading the model" in live
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    assert 'hx-trigger="every 2s"' not in client.get(reverse("training:job_live", args=[job.id])).content.decode()


def test_an_eval_job_has_no_training_charts_but_links_its_evaluation_page(client, make_user, eval_run):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_detail", args=[eval_run.job_id])).content.decode()
    assert 'id="job-charts"' not in page
    assert reverse("training:eval_detail", args=[eval_run.job_id]) in page
    assert "What to try next" in page and "Per task (5)" in page and "Per failure bucket (2)" in page


def test_a_viewer_sees_no_launch_or_cancel_buttons_and_a_trainer_does(client, make_user, tiny_train_snapshot):
    job = make_job(tiny_train_snapshot)
    cancel, launch = reverse("training:job_cancel", args=[job.id]), reverse("training:job_new")
    detail, jobs = reverse("training:job_detail", args=[job.id]), reverse("training:job_list")
    client.force_login(make_user(Role.VIEWER))
    assert cancel not in client.get(detail).content.decode() and launch not in client.get(jobs).content.decode()
    client.force_login(make_user(Role.TRAINER))
    assert cancel in client.get(detail).content.decode() and launch in client.get(jobs).content.decode()


# --- The chart JSON ----------------------------------------------------------------------------


def test_the_chart_json_holds_a_chart_per_panel_with_data_and_counts_the_points(client, make_user, tiny_train_snapshot):
    job = make_job(tiny_train_snapshot)
    add_points(job, {
        "reward/mean": [0.1, 0.2, 0.4], "reward/std": [0.05, 0.05, 0.1], "reward/format/mean": [0.5, 0.7, 0.9],
        "heldout/correct_arguments_rate": [0.3, 0.4], "heldout/valid_json_rate": [0.8, 0.9],
        "heldout/unsafe_action_rate": [0.0, 0.0], "kl": [0.0, 0.01, 0.02], "tied_group_fraction": [0.5, 0.25, 0.25],
        "completion_length": [40, 38, 35], "tokens_per_second": [120, 130, 128],
    })  # fmt: skip
    client.force_login(make_user(Role.VIEWER))
    body = client.get(reverse("training:job_chart", args=[job.id])).json()
    keys = [chart["key"] for chart in body["charts"]]
    assert keys[:2] == ["reward", "components"]
    assert {"heldout", "valid", "unsafe", "kl", "tied", "length", "throughput"} <= set(keys)
    assert body["points"] == 3 + 3 + 3 + 2 + 2 + 2 + 3 + 3 + 3 + 3 and body["finished"] is False
    kl = next(chart for chart in body["charts"] if chart["key"] == "kl")
    assert kl["figure"]["data"][0]["y"] == [0.0, 0.01, 0.02]
    # The reward draws a ±std band: its upper edge is mean + std.
    reward = next(chart for chart in body["charts"] if chart["key"] == "reward")
    assert reward["figure"]["data"][0]["y"] == pytest.approx([0.15, 0.25, 0.5])


def test_the_chart_json_counts_only_the_current_attempt_and_says_when_the_job_finished(
    client, make_user, tiny_train_snapshot
):
    job = make_job(tiny_train_snapshot, state="succeeded", attempts=2)
    add_points(job, {"reward/mean": [0.1, 0.2, 0.3]}, attempt=1)
    add_points(job, {"reward/mean": [0.3, 0.4]}, attempt=2)
    client.force_login(make_user(Role.VIEWER))
    body = client.get(reverse("training:job_chart", args=[job.id])).json()
    assert body["points"] == 2 and body["finished"] is True
    assert [chart["key"] for chart in body["charts"]] == ["reward"]


def test_the_chart_json_of_a_job_without_metrics_is_empty(client, make_user, tiny_train_snapshot):
    job = make_job(tiny_train_snapshot, state="queued")
    client.force_login(make_user(Role.VIEWER))
    body = client.get(reverse("training:job_chart", args=[job.id])).json()
    assert body == {"charts": [], "points": 0, "finished": False, "version": f"{job.attempts}:0"}


def test_the_chart_json_answers_unchanged_until_a_point_arrives(client, make_user, tiny_train_snapshot):
    job = make_job(tiny_train_snapshot)
    add_points(job, {"reward/mean": [0.1, 0.2]})
    client.force_login(make_user(Role.VIEWER))
    url = reverse("training:job_chart", args=[job.id])
    drawn = client.get(url).json()["version"]
    assert client.get(url, {"version": drawn}).json() == {"unchanged": True, "version": drawn, "finished": False}

    add_points(job, {"kl": [0.0]})
    again = client.get(url, {"version": drawn}).json()
    assert again["version"] != drawn and [chart["key"] for chart in again["charts"]] == ["reward", "kl"]


# --- Samples -----------------------------------------------------------------------------------


@pytest.fixture
def sampled_job(tiny_train_snapshot) -> Job:
    job = make_job(tiny_train_snapshot)
    add_sample(job, 10, 0.1, format=0.0, correct=0.1)
    add_sample(job, 10, 0.9, format=1.0, correct=0.8)
    add_sample(job, 20, 0.5, format=1.0, correct=0.3)
    add_sample(job, 20, 1.0, format=1.0, correct=1.0)
    return job


def shown_samples(response) -> list[tuple[int, float]]:
    rows = re.findall(r'data-sample-step="(\d+)" data-sample-reward="([\d.]+)"', response.content.decode())
    return [(int(step), float(reward)) for step, reward in rows]


def test_the_sample_filter_narrows_the_rows_by_step(client, make_user, sampled_job):
    client.force_login(make_user(Role.VIEWER))
    response = client.get(reverse("training:job_samples", args=[sampled_job.id]), {"step": "10"})
    assert shown_samples(response) == [(10, 0.1), (10, 0.9)]
    assert "2 of 2 samples matching the filters" in response.content.decode()


def test_the_sample_filter_narrows_the_rows_by_reward_and_component_range(client, make_user, sampled_job):
    client.force_login(make_user(Role.VIEWER))
    url = reverse("training:job_samples", args=[sampled_job.id])
    assert shown_samples(client.get(url, {"min_reward": "0.5"})) == [(20, 0.5), (20, 1.0), (10, 0.9)]
    by_component = {"component": "correct", "component_min": "0.2", "component_max": "0.9"}
    assert shown_samples(client.get(url, by_component)) == [(20, 0.5), (10, 0.9)]


def test_the_sample_partial_pushes_the_filters_into_the_pages_address(client, make_user, sampled_job):
    client.force_login(make_user(Role.VIEWER))
    response = client.get(reverse("training:job_samples", args=[sampled_job.id]), {"step": "20", "min_reward": ""})
    assert response["HX-Push-Url"] == reverse("training:job_detail", args=[sampled_job.id]) + "?step=20"
    assert '<option value="20" selected>20</option>' in response.content.decode()


def test_the_live_page_reads_sample_filters_from_its_address(client, make_user, sampled_job):
    client.force_login(make_user(Role.VIEWER))
    response = client.get(reverse("training:job_detail", args=[sampled_job.id]), {"max_reward": "0.2"})
    assert shown_samples(response) == [(10, 0.1)]


def test_an_invalid_sample_filter_is_ignored_and_named(client, make_user, sampled_job):
    client.force_login(make_user(Role.VIEWER))
    response = client.get(reverse("training:job_samples", args=[sampled_job.id]), {"min_reward": "lots"})
    assert len(shown_samples(response)) == 4 and "Ignored: min_reward" in response.content.decode()


# --- Jobs list and compare ---------------------------------------------------------------------


def test_the_jobs_list_filters_by_agent_and_launcher_from_menus(client, make_user, tiny_train_snapshot):
    alice, bob = make_user(Role.TRAINER, "alice"), make_user(Role.TRAINER, "bob")
    agent = Agent.objects.create(name="support-bot")
    mine = make_job(tiny_train_snapshot, agent=agent, launched_by=alice)
    theirs = make_job(tiny_train_snapshot, launched_by=bob)
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_list"), {"agent": "support-bot", "launched_by": "alice"}).content.decode()
    assert '<option value="support-bot" selected>' in page and '<option value="alice" selected>' in page
    assert '<option value="bob">' in page
    assert f'value="{mine.id}" form="compare-jobs"' in page and str(theirs.id) not in page
    assert f'action="{reverse("training:job_compare")}"' in page


def test_the_compare_page_draws_one_curve_per_job_of_the_chosen_metric(client, make_user, tiny_train_snapshot):
    first, second = make_job(tiny_train_snapshot), make_job(tiny_train_snapshot, kind="sft", state="succeeded")
    add_points(first, {"reward/mean": [0.1, 0.3, 0.5], "kl": [0.0, 0.1, 0.2]})
    add_points(second, {"reward/mean": [0.2, 0.2], "loss": [2.0, 1.5]})
    client.force_login(make_user(Role.VIEWER))
    url = reverse("training:job_compare")
    page = client.get(url, {"job": [first.id, second.id]}).content.decode()
    figure = embedded_figure(page, "compare-figure")
    assert len(figure["data"]) == 2 and figure["layout"]["title"]["text"] == "reward/mean"
    assert sorted(trace["y"] for trace in figure["data"]) == [[0.1, 0.3, 0.5], [0.2, 0.2]]
    assert '<option value="kl">kl</option>' in page and '<option value="loss">loss</option>' in page
    assert reverse("training:job_detail", args=[first.id]) in page
    assert reverse("training:job_detail", args=[second.id]) in page
    kl = embedded_figure(client.get(url, {"job": [first.id, second.id], "metric": "kl"}).content.decode(),
                         "compare-figure")  # fmt: skip
    assert [len(trace["y"]) for trace in kl["data"]] in ([3, 0], [0, 3])


def test_the_compare_page_without_two_jobs_says_how_to_pick_them(client, make_user):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:job_compare"), {"job": "not-a-job"}).content.decode()
    assert "Pick two or more jobs" in page


# --- The evaluation page -----------------------------------------------------------------------


def test_the_evaluation_page_shows_rates_with_intervals_buckets_and_tasks(client, make_user, eval_run):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:eval_detail", args=[eval_run.job_id])).content.decode()
    overall = re.search(r'<tr data-rate="correct_arguments_rate">(.*?)</tr>', page, re.S)
    assert overall and "0.400" in overall.group(1) and "0.000 – 0.800" in overall.group(1)
    assert "no environment ran the calls" in page
    assert 'data-bucket="wrong_tool"' in page and 'data-bucket="bad_arguments"' in page
    assert "0.33 <span" in page and "Per task (5)" in page and "reason for task 4" in page
    rates = embedded_figure(page, "rates-figure")
    assert rates["data"][0]["error_y"]["array"] == pytest.approx([0.2, 0.4, 0.4, 0.0])
    assert len(embedded_figure(page, "bucket-figure")["data"][0]["y"]) == 2


def test_the_evaluation_page_shows_the_parseable_rate_beside_valid_json(client, make_user, eval_run):
    EvalRun.objects.filter(pk=eval_run.pk).update(metrics={**RATES, "parseable_rate": rate(0.9, 0.6, 1.0)})
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:eval_detail", args=[eval_run.job_id])).content.decode()
    row = re.search(r'<tr data-rate="parseable_rate">(.*?)</tr>', page, re.S)
    assert row and "Parseable call" in row.group(1) and "0.900" in row.group(1)


def test_an_evaluation_of_episodes_shows_turns_truncation_and_how_each_episode_ended(client, make_user, eval_run):
    metrics = {**RATES, "truncation_rate": rate(0.2, 0.04, 0.62), "turns_per_episode": 2.6, "calls_per_episode": 1.8}
    results = [{**result, "turns": 3, "ended": "turn_budget"} for result in eval_run.results]
    EvalRun.objects.filter(pk=eval_run.pk).update(metrics=metrics, results=results)
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:eval_detail", args=[eval_run.job_id])).content.decode()
    row = re.search(r'<tr data-rate="truncation_rate">(.*?)</tr>', page, re.S)
    assert row and "Episodes cut by a budget" in row.group(1) and "0.040 – 0.620" in row.group(1)
    assert "Turns per episode" in page and "2.6" in page and "Calls per episode" in page
    assert page.count("3 turns, ended: turn_budget") == 5


def test_a_single_turn_evaluation_shows_no_episode_figures(client, make_user, eval_run):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("training:eval_detail", args=[eval_run.job_id])).content.decode()
    assert "truncation_rate" not in page and "Turns per episode" not in page and "ended:" not in page


def test_only_a_trainer_sees_the_buttons_that_launch_the_recommended_methods(client, make_user, eval_run):
    url = reverse("training:eval_detail", args=[eval_run.job_id])
    client.force_login(make_user(Role.VIEWER))
    page = client.get(url).content.decode()
    # 20% invalid outputs: a prompt change first; sometimes right with a verifier: GRPO.
    assert "Recommended next: a prompt change" in page and "data-launch=" not in page
    assert re.findall(r'<li data-option="(\w+)">', page) == ["prompt", "grpo"]
    client.force_login(make_user(Role.TRAINER))
    page = client.get(url).content.decode()
    launch = re.search(r'<a class="button" href="([^"]+)" data-launch="grpo">Launch GRPO</a>', page)
    assert launch and launch.group(1).startswith(reverse("training:job_new") + "?kind=grpo")
    assert f"heldout_snapshot={eval_run.snapshot_id}" in launch.group(1)


def test_a_job_without_evaluation_results_has_no_evaluation_page(client, make_user, tiny_train_snapshot):
    client.force_login(make_user(Role.VIEWER))
    job = make_job(tiny_train_snapshot)
    assert client.get(reverse("training:eval_detail", args=[job.id])).status_code == 404


def test_the_grpo_launch_form_shows_the_judge_mode_with_defaults_the_trainer_accepts():
    shown = json.loads(JobLaunchForm(initial={"kind": "grpo"}).fields["hyperparameters"].initial)
    assert (shown["reward"], shown["judge_mode"]) == ("verifier", "single")
    config = config_from_json(GrpoConfig, DEFAULT_HYPERPARAMETERS["grpo"], "grpo hyperparameters")
    assert (config.reward, config.judge_mode) == ("verifier", "single")
