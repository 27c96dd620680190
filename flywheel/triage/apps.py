from django.apps import AppConfig


class TriageConfig(AppConfig):
    name = "flywheel.triage"
    label = "triage"
    verbose_name = "Triage"

    def ready(self) -> None:
        # Ingest never imports triage; triage listens for trajectories being stored to suggest buckets.
        from flywheel.ingest.signals import trajectories_stored
        from flywheel.triage.services import on_trajectories_stored

        trajectories_stored.connect(on_trajectories_stored, dispatch_uid="triage.on_trajectories_stored")
