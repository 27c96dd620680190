from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "flywheel.dashboards"
    label = "dashboards"
    verbose_name = "Dashboards"
