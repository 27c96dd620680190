"""Signals other apps listen to, so that ingest never imports them.

`trajectories_stored` is sent after the transaction that stored (or refreshed) trajectories
commits, once per batch, with their ids; triage listens to suggest buckets for them and to let
queue rules take them in. It is sent for uploads, the ingestion API and OTLP alike: they all store
through `ingest.services`.

`feedback_received` is sent after an end user's feedback on a trajectory is committed
(`services.feedback_add`), with that trajectory's id; triage listens to let queue rules on
feedback take it in.
"""

from django.dispatch import Signal

trajectories_stored = Signal()  # kwargs: trajectory_ids (list[UUID]), never empty
feedback_received = Signal()  # kwargs: trajectory_ids (list[UUID]), never empty
