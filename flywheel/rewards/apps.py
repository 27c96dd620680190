from django.apps import AppConfig


class RewardsConfig(AppConfig):
    name = "flywheel.rewards"
    label = "rewards"
    verbose_name = "Reward profiling"
