from django.apps import AppConfig


class TriageConfig(AppConfig):
    name = "flywheel.triage"
    label = "triage"
    verbose_name = "Triage"
