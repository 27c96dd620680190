"""The dpo job kind on the app side: launched only on a snapshot of preference pairs, its pairs written for trainer."""

from __future__ import annotations

import json

import pytest

from flywheel.core.models import Agent
from flywheel.core.roles import Role
from flywheel.datasets.exports import snapshot_lines
from flywheel.datasets.models import PairSource
from flywheel.datasets.services import PairDraft, pair_create, pair_snapshot_create
from flywheel.training import runner, services
from flywheel.training.forms import DEFAULT_HYPERPARAMETERS, HELDOUT_KINDS, JobLaunchForm
from flywheel.training.models import TRAINING_KINDS, Job, JobKind, JobState
from flywheel.training.services import LaunchRefused
from tests.trainer.tiny_model import FIXTURES
from trainer.contracts import RunSpec
from trainer.spec.config import config_from_json
from trainer.spec.dpo import DpoConfig
from trainer.spec.pairs import read_pair_files

pytestmark = pytest.mark.django_db
PAIR_LINES = (FIXTURES / "preference_pairs.jsonl").read_text().splitlines()


@pytest.fixture
def trainer(make_user):
    return make_user(Role.TRAINER)


@pytest.fixture
def pairs_snapshot(tiny_train_snapshot, trainer):
    """A train snapshot of the fixture's preference pairs, frozen by the datasets app as a dpo job reads them."""
    agent = tiny_train_snapshot.agent or Agent.objects.create(name="pairs-agent")
    for line in PAIR_LINES:
        pair = json.loads(line)
        draft = PairDraft(
            agent=agent, prompt=pair["prompt"], tools=pair.get("tools", []), chosen=pair["chosen"],
            rejected=pair["rejected"], source=PairSource.CORRECTION, trajectory=None, step_index=0,
        )  # fmt: skip
        pair_create(actor=trainer, draft=draft, split="train")
    return pair_snapshot_create(actor=trainer, name="pairs", split="train", agent=agent)


def test_dpo_is_a_training_kind_the_launch_form_offers_with_defaults_the_trainer_accepts():
    assert JobKind.DPO in TRAINING_KINDS and JobKind.DPO in HELDOUT_KINDS
    assert ("dpo", "DPO") in JobLaunchForm().fields["kind"].choices
    config = config_from_json(DpoConfig, DEFAULT_HYPERPARAMETERS[JobKind.DPO], "dpo hyperparameters")
    assert (config.beta, config.loss_type) == (0.1, "sigmoid")


def test_a_dpo_launch_on_a_snapshot_of_tasks_is_refused_before_queueing(trainer, tiny_train_snapshot):
    with pytest.raises(LaunchRefused, match="preference pairs"):  # the reason, worded by whichever check refuses
        services.job_launch(actor=trainer, kind="dpo", snapshot=tiny_train_snapshot, base_model="demo")
    assert not Job.objects.exists()


def test_a_dpo_launch_with_a_bad_knob_is_refused_naming_it(trainer, pairs_snapshot):
    with pytest.raises(LaunchRefused, match="dpo hyperparameters: beta must be above 0"):
        services.job_launch(actor=trainer, kind="dpo", snapshot=pairs_snapshot, base_model="demo",
                            hyperparameters={"beta": 0})  # fmt: skip
    job = services.job_launch(actor=trainer, kind="dpo", snapshot=pairs_snapshot, base_model="demo",
                              hyperparameters={"beta": 0.2})  # fmt: skip
    assert (job.kind, job.state, job.hyperparameters) == ("dpo", JobState.QUEUED, {"beta": 0.2})


def test_a_dpo_job_hands_the_trainer_its_snapshots_pairs(pairs_snapshot, tmp_path):
    job = Job.objects.create(kind="dpo", snapshot=pairs_snapshot, base_model="demo", attempts=1,
                             hyperparameters={"beta": 0.2, "seed": 3})  # fmt: skip
    spec = RunSpec.from_json(json.loads(runner.write_spec(job, tmp_path).read_text()))
    assert (spec.kind, spec.seed, spec.hyperparameters) == ("dpo", 3, {"beta": 0.2})
    assert spec.task_paths == [str(tmp_path / "pairs.jsonl")]
    read = read_pair_files(spec.task_paths, strict=True).pairs
    frozen = [json.loads(line) for line in snapshot_lines(pairs_snapshot, "native")]
    assert [pair.id for pair in read] == [line["id"] for line in frozen] and len(read) == len(PAIR_LINES)
    expected = sorted(chosen_calls(json.loads(line)) for line in PAIR_LINES)
    assert sorted(chosen_calls(line) for line in frozen) == expected


def chosen_calls(pair: dict) -> str:
    calls = pair["chosen"][0].get("tool_calls") or []
    named = [(call["function"]["name"], call["function"]["arguments"]) for call in calls]
    return json.dumps([(name, json.loads(args) if isinstance(args, str) else args) for name, args in named])


def test_a_dpo_job_whose_snapshot_holds_no_pairs_fails_saying_so(tiny_train_snapshot, settings, tmp_path):
    settings.JOB_RUNS_DIR = str(tmp_path)
    job = Job.objects.create(kind="dpo", snapshot=tiny_train_snapshot, base_model="demo", attempts=1,
                             state=JobState.RUNNING)  # fmt: skip
    finished = runner.run_attempt(job)
    assert finished.state == JobState.FAILED
    assert "this snapshot has no preference pairs" in finished.error
