from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "flywheel.registry"
    label = "registry"
    verbose_name = "Registry"
