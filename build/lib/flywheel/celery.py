"""The Celery application: queues `default` (ingestion, light work) and `gpu` (eval, training).

Routing, prefetch and the broker's visibility timeout are settings (CELERY_* in settings.py);
tasks on `gpu` also declare `acks_late` themselves so a crashed worker's job is redelivered.
Celery beat runs the sweepers of the outbox (CELERY_BEAT_SCHEDULE): the job reaper, which also
re-sends queued jobs with no message behind them, and the upload sweeper.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")

app = Celery("flywheel")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
