from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "flywheel.demo"
    label = "demo"
    verbose_name = "Demo"

    def ready(self) -> None:
        # Training never imports the demo; the demo listens for its jobs finishing to move the loop on.
        from flywheel.demo.tasks import on_job_finished
        from flywheel.training.signals import job_finished

        job_finished.connect(on_job_finished, dispatch_uid="demo.on_job_finished")
