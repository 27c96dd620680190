from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "flywheel.dashboards"
    label = "dashboards"
    verbose_name = "Dashboards"

    def ready(self) -> None:
        from flywheel.dashboards.tasks import on_job_finished
        from flywheel.training.signals import job_finished

        job_finished.connect(on_job_finished, dispatch_uid="dashboards.on_job_finished")
