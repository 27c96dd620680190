from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "flywheel.core"
    label = "core"
    verbose_name = "Core"
