from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    name = "flywheel.datasets"
    label = "datasets"
    verbose_name = "Datasets"
