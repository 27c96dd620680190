"""Model versions, gate results, promotion, rollback and the live pointer."""
from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "flywheel.registry"
    label = "registry"
    verbose_name = "Registry"

    def ready(self) -> None:
        # Training never imports the registry; the registry listens for its jobs finishing.
        from flywheel.registry.services import on_job_finished
        from flywheel.training.signals import job_finished

        job_finished.connect(on_job_finished, dispatch_uid="registry.on_job_finished")
