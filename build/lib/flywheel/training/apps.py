from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "flywheel.training"
    label = "training"
    verbose_name = "Training"
