from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    name = "flywheel.datasets"
    label = "datasets"
    verbose_name = "Datasets"

    def ready(self) -> None:
        # A finished synth job's variants become a batch to review; training never imports this app's services.
        from flywheel.datasets.services import on_synth_job_finished
        from flywheel.training.signals import job_finished

        job_finished.connect(on_synth_job_finished, dispatch_uid="datasets.on_synth_job_finished")
