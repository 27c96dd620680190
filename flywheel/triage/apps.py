from django.apps import AppConfig


class TriageConfig(AppConfig):
    name = "flywheel.triage"
    label = "triage"
    verbose_name = "Triage"

    def ready(self) -> None:
        # Ingest never imports triage; triage listens for trajectories being stored (to suggest buckets and
        # apply queue rules) and for feedback arriving (queue rules on feedback).
        from flywheel.ingest.signals import feedback_received, trajectories_stored
        from flywheel.triage.services import on_feedback_received, on_trajectories_stored

        trajectories_stored.connect(on_trajectories_stored, dispatch_uid="triage.on_trajectories_stored")
        feedback_received.connect(on_feedback_received, dispatch_uid="triage.on_feedback_received")
