"""Signals other apps listen to, so that ingest never imports them.

`trajectories_stored` is sent after the transaction that stored (or refreshed) trajectories
commits, once per batch, with their ids; triage listens to suggest buckets for them. It is
sent for uploads, the ingestion API and OTLP alike: they all store through `ingest.services`.
"""

from django.dispatch import Signal

trajectories_stored = Signal()  # kwargs: trajectory_ids (list[UUID]), never empty
