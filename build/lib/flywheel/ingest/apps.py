from django.apps import AppConfig


class IngestConfig(AppConfig):
    name = "flywheel.ingest"
    label = "ingest"
    verbose_name = "Ingest"
