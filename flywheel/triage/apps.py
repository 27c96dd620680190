from django.apps import AppConfig


class TriageConfig(AppConfig):
    name = "flywheel.triage"
    label = "triage"
    verbose_name = "Triage"

    def ready(self) -> None:
        # Ingest never imports triage; triage listens for trajectories being stored (to suggest buckets and
        # apply queue rules), for feedback arriving (queue rules on feedback) and, from monitoring, for
        # online scores stored (queue rules on online scores); after migrate or flush, it puts back the
        # built-in buckets.
        from django.db.models.signals import post_migrate

        from flywheel.ingest.signals import feedback_received, trajectories_stored
        from flywheel.monitoring.signals import online_scores_stored
        from flywheel.triage.services import (
            on_feedback_received,
            on_online_scores_stored,
            on_post_migrate,
            on_trajectories_stored,
        )

        trajectories_stored.connect(on_trajectories_stored, dispatch_uid="triage.on_trajectories_stored")
        feedback_received.connect(on_feedback_received, dispatch_uid="triage.on_feedback_received")
        online_scores_stored.connect(on_online_scores_stored, dispatch_uid="triage.on_online_scores_stored")
        post_migrate.connect(on_post_migrate, sender=self, dispatch_uid="triage.on_post_migrate")
