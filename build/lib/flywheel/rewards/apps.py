from django.apps import AppConfig


class RewardsConfig(AppConfig):
    name = "flywheel.rewards"
    label = "rewards"
    verbose_name = "Reward profiling"

    def ready(self) -> None:
        from flywheel.rewards.services import on_job_finished, on_job_launching, on_judge_agreement_requested
        from flywheel.training.signals import job_finished, job_launching, judge_agreement_requested

        job_finished.connect(on_job_finished, dispatch_uid="rewards.on_job_finished")
        job_launching.connect(on_job_launching, dispatch_uid="rewards.on_job_launching")
        judge_agreement_requested.connect(on_judge_agreement_requested, dispatch_uid="rewards.on_judge_agreement")
