from django.apps import AppConfig


class RewardsConfig(AppConfig):
    name = "flywheel.rewards"
    label = "rewards"
    verbose_name = "Reward profiling"

    def ready(self) -> None:
        from flywheel.rewards.services import on_job_finished, on_job_launching
        from flywheel.training.signals import job_finished, job_launching

        job_finished.connect(on_job_finished, dispatch_uid="rewards.on_job_finished")
        job_launching.connect(on_job_launching, dispatch_uid="rewards.on_job_launching")
