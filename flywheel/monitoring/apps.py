from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "flywheel.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring"

    def ready(self) -> None:
        # Ingest never imports monitoring; monitoring listens for stored trajectories to score them online.
        from flywheel.ingest.signals import trajectories_stored
        from flywheel.monitoring.services import on_trajectories_stored

        trajectories_stored.connect(on_trajectories_stored, dispatch_uid="monitoring.on_trajectories_stored")
