"""Signals other apps listen to, so that training never imports them.

`job_finished` is sent inside `job_finish`'s transaction once a job reaches a finished state; the
registry listens to register a succeeded training job's adapter and to store a gate's decision.
"""

from django.dispatch import Signal

job_finished = Signal()  # kwargs: job
