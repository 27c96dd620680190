"""An eval job launched from the app with the vllm backend runs on a worker in .venv-vllm, through an adapter."""

from __future__ import annotations

import pytest

from flywheel.core.roles import Role
from flywheel.training import services
from flywheel.training.models import EvalRun
from tests.flywheel.training.conftest import tiny_snapshot, wait_for  # noqa: F401 - a fixture
from tests.vllm.conftest import VLLM_ENV

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.worker]


@pytest.mark.django_db(transaction=True)
def test_an_eval_job_with_the_vllm_backend_runs_in_vllms_python_on_a_worker(
    vllm_model, tiny_snapshot, make_user, celery_worker_process  # noqa: F811 - the fixture
):
    model_dir, adapter_dir = vllm_model
    celery_worker_process("gpu", env=VLLM_ENV)
    job = services.job_launch(actor=make_user(Role.TRAINER), kind="eval", snapshot=tiny_snapshot,
                              base_model=str(model_dir), adapter=str(adapter_dir),
                              hyperparameters={"backend": "vllm", "max_new_tokens": 16})  # fmt: skip
    job = wait_for(job, ("succeeded", "failed"), timeout=400)
    assert job.state == "succeeded", job.error + job.log_tail
    assert f"{model_dir} on vllm" in job.log_tail  # the main virtualenv has no vLLM: this ran in .venv-vllm
    run = EvalRun.objects.get(job=job)
    assert len(run.results) == tiny_snapshot.items.count()
    assert all(result["completion_tokens"] >= 1 for result in run.results)
