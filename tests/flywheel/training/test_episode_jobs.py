"""Episode jobs from the app: the agent's environment reaches the spec; MCP and entry-point environments on a worker."""

from __future__ import annotations

import sys

import pytest
from django.core.exceptions import ValidationError

from flywheel.core.roles import Role
from flywheel.core.services import agent_create
from flywheel.datasets.importers import read
from flywheel.datasets.services import snapshot_create, tasks_import
from flywheel.training import services
from flywheel.training.models import EvalRun, MetricPoint, Sample
from flywheel.training.services import LaunchRefused
from tests.conftest import REPO_ROOT
from tests.flywheel.training.conftest import TINY_MODEL, wait_for

ORDERS_TASKS = REPO_ROOT / "trainer" / "examples" / "orders_tasks.jsonl"
ORDERS = "trainer.examples.orders:environment"
ORDERS_MCP = f"mcp:{sys.executable} -m trainer.examples.orders_mcp"


@pytest.fixture
def trainer(make_user):
    return make_user(Role.TRAINER)


@pytest.fixture
def team_environments(settings):
    settings.TRAINER_ENVIRONMENTS = [ORDERS, ORDERS_MCP]


def orders_snapshot(split: str, agent=None):
    tasks_import(actor=None, candidates=read(ORDERS_TASKS, "native"), split=split, agent=agent, source_ref="orders")
    return snapshot_create(actor=None, name=f"orders-{split}", split=split, agent=agent)


@pytest.mark.django_db
def test_an_agent_names_only_an_environment_the_operator_allows(team_environments):
    assert agent_create(actor=None, name="desk", environment=ORDERS).environment == ORDERS
    with pytest.raises(ValidationError, match="not one this installation allows"):
        agent_create(actor=None, name="rogue", environment="os:system")


@pytest.mark.django_db
def test_a_job_of_the_agent_carries_its_environment_unless_it_names_its_own(team_environments, trainer):
    agent = agent_create(actor=None, name="desk", environment=ORDERS)
    snapshot = orders_snapshot("heldout", agent)
    job = services.job_launch(actor=trainer, kind="eval", snapshot=snapshot, base_model="demo", agent=agent,
                              hyperparameters={"max_turns": 4})  # fmt: skip
    assert job.hyperparameters == {"max_turns": 4, "environment": ORDERS}
    own = services.job_launch(actor=trainer, kind="eval", snapshot=snapshot, base_model="demo",
                              hyperparameters={"environment": None})  # the snapshot's agent, overridden
    assert own.hyperparameters == {"environment": None}
    with pytest.raises(LaunchRefused, match="not one this installation allows"):
        services.job_launch(actor=trainer, kind="eval", snapshot=snapshot, base_model="demo",
                            hyperparameters={"environment": "mcp:rm -rf /"})  # fmt: skip


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_an_eval_job_plays_episodes_against_the_example_mcp_server_on_a_worker(team_environments, trainer,
                                                                               celery_worker_process):
    celery_worker_process("gpu")
    agent = agent_create(actor=None, name="desk", environment=ORDERS_MCP)
    hyperparameters = {"device": "cpu", "batch_size": 6, "max_new_tokens": 16, "max_turns": 2}
    job = services.job_launch(actor=trainer, kind="eval", snapshot=orders_snapshot("heldout", agent),
                              base_model=str(TINY_MODEL), agent=agent, hyperparameters=hyperparameters)  # fmt: skip
    job = wait_for(job, ("succeeded", "failed"), timeout=300)
    assert job.state == "succeeded", job.error + job.log_tail
    assert job.hyperparameters["environment"] == ORDERS_MCP
    run = EvalRun.objects.get(job=job)
    assert len(run.results) == 6 and all(result["ended"] and result["turns"] >= 1 for result in run.results)
    assert "turns_per_episode" in run.metrics
    assert all(result["execution_success"] is False for result in run.results)  # a random model solves nothing
    samples = Sample.objects.filter(job=job)
    assert samples and all(sample.episode and sample.episode[0]["role"] == "assistant" for sample in samples)


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("environment", [ORDERS, ORDERS_MCP], ids=["entry_point", "mcp"])
def test_a_grpo_job_trains_on_episodes_of_a_team_environment_on_a_worker(environment, team_environments, trainer,
                                                                        celery_worker_process):
    celery_worker_process("gpu")
    agent = agent_create(actor=None, name="desk", environment=environment)
    hyperparameters = {"num_generations": 2, "max_steps": 2, "max_completion_length": 24, "max_turns": 2,
                       "eval_interval": 0, "checkpoint_interval": 0, "max_truncated_share": 1.0, "device": "cpu"}
    job = services.job_launch(actor=trainer, kind="grpo", snapshot=orders_snapshot("train", agent),
                              base_model=str(TINY_MODEL), agent=agent, hyperparameters=hyperparameters)  # fmt: skip
    job = wait_for(job, ("succeeded", "failed"), timeout=300)
    assert job.state == "succeeded", job.error + job.log_tail
    names = set(MetricPoint.objects.filter(job=job).values_list("name", flat=True))
    assert {"reward/mean", "episode/turns/mean", "episode/truncated/mean"} <= names
    assert "episodes of at most 2 turns" in job.log_tail
