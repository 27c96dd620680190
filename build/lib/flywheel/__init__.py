"""agent-flywheel: the Django project. The Celery app is imported so `shared_task` binds to it."""

from flywheel.celery import app as celery_app

__all__ = ["celery_app"]
