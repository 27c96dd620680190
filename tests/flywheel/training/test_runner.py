"""The runner's run.json: what the app hands the trainer for one attempt."""

from __future__ import annotations

import json

import pytest

from flywheel.core.roles import Role
from flywheel.core.services import agent_create
from flywheel.training import runner
from flywheel.training.models import Job
from flywheel.triage.services import agent_policy_set
from trainer.contracts import RunSpec
from trainer.verifiers import SafetyPolicy

pytestmark = pytest.mark.django_db


def test_every_job_carries_its_agents_safety_policy(tiny_snapshot, make_user, tmp_path):
    admin = make_user(Role.ADMIN)
    agent = agent_create(actor=None, name="careful-bot")
    policy = {**SafetyPolicy.default().to_json(), "name": "careful", "denied_tools": ["math.factorial"]}
    agent_policy_set(actor=admin, agent=agent, policy=policy)
    job = Job.objects.create(kind="eval", snapshot=tiny_snapshot, base_model="x", agent=agent, attempts=1)
    spec = RunSpec.from_json(json.loads(runner.write_spec(job, tmp_path / "with").read_text()))
    assert spec.safety_policy == policy
    assert SafetyPolicy.from_json(spec.safety_policy).denied_tools == ["math.factorial"]


def test_a_job_of_an_agent_without_a_policy_leaves_the_default_to_the_trainer(tiny_snapshot, tmp_path):
    job = Job.objects.create(kind="eval", snapshot=tiny_snapshot, base_model="x", attempts=1,
                             agent=agent_create(actor=None, name="plain-bot"))
    spec = RunSpec.from_json(json.loads(runner.write_spec(job, tmp_path / "without").read_text()))
    assert spec.safety_policy is None


def test_a_job_that_chooses_vllm_to_generate_starts_in_vllms_python(tiny_snapshot, settings):
    settings.TRAINER_COMMAND = ["python", "-m", "trainer"]
    settings.TRAINER_VLLM_COMMAND = ["vllm-python", "-m", "trainer"]
    on_vllm = Job(kind="eval", snapshot=tiny_snapshot, base_model="demo", hyperparameters={"backend": "vllm"})
    plain = Job(kind="eval", snapshot=tiny_snapshot, base_model="demo", hyperparameters={"backend": "auto"})
    assert runner.trainer_command(on_vllm) == ["vllm-python", "-m", "trainer"]
    assert runner.trainer_command(plain) == ["python", "-m", "trainer"]
    by_vllm = Job(kind="grpo", snapshot=tiny_snapshot, base_model="demo", hyperparameters={"generation": "vllm"})
    assert runner.trainer_command(by_vllm) == ["vllm-python", "-m", "trainer"]
    settings.TRAINER_VLLM_COMMAND = []  # an installation whose own Python has vLLM
    assert runner.trainer_command(on_vllm) == ["python", "-m", "trainer"]
