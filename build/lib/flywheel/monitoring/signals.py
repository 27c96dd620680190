"""Signals of the monitoring app, so that the apps that react to online scores need not be called by it.

`online_scores_stored` is sent once the verdicts of a scoring run are committed, with the ids of
the trajectories scored (whether or not a verdict was new: receivers must be idempotent); triage
listens to offer them to the queues' rules again, since a rule on an online score may match now.
"""

from django.dispatch import Signal

online_scores_stored = Signal()  # kwargs: trajectory_ids (list[UUID]), never empty
