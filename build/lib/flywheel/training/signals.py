"""Signals other apps listen to, so that training never imports them.

`job_finished` is sent inside the transaction that brings a job to a finished state, whichever
does: `job_finish` (its worker's end), `job_cancel` (a queued job cancelled) and the reaper giving up
on a job whose worker was lost. The registry listens to register a succeeded training job's adapter
and to close a gate or a replay (with its decision or answer, or with the job's error); the rewards
app to store a judge job's judgements.

`job_launching` is sent by `job_launch` before a job is saved; a receiver refuses the launch by
raising `services.LaunchRefused`, or completes its hyperparameters by returning a dict of them (the
rewards app refuses a GRPO reward from an unapproved judge, and names the approved judge's model,
adapter and rubric).

`judge_agreement_requested` is sent by the evaluation page's recommendation: a receiver returns the
agreement (0..1) of the agent's judge where it is approved as a training reward, else None (the
rewards app measures it).
"""

from django.dispatch import Signal

job_finished = Signal()  # kwargs: job
job_launching = Signal()  # kwargs: kind, agent (or None), hyperparameters
judge_agreement_requested = Signal()  # kwargs: agent
