from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "flywheel.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring"

    def ready(self) -> None:
        # Ingest never imports monitoring; monitoring listens for stored trajectories to score them online.
        from flywheel.ingest.signals import trajectories_stored
        from flywheel.monitoring.services import on_job_finished, on_trajectories_stored
        from flywheel.training.signals import job_finished

        trajectories_stored.connect(on_trajectories_stored, dispatch_uid="monitoring.on_trajectories_stored")
        job_finished.connect(on_job_finished, dispatch_uid="monitoring.on_job_finished")
