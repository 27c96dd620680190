"""Signals other apps listen to, so that training never imports them.

`job_finished` is sent inside the transaction that brings a job to a finished state, whichever
does: `job_finish` (its worker's end), `job_cancel` (a queued job cancelled) and the reaper giving up
on a job whose worker was lost. The registry listens to register a succeeded training job's adapter
and to close a gate or a replay (with its decision or answer, or with the job's error).
"""

from django.dispatch import Signal

job_finished = Signal()  # kwargs: job
