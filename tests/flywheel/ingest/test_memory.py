"""Memory bounded by bytes, not only by record count: batches, the read-ahead, and one huge gzipped record."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc

import pytest

from flywheel.ingest import services
from flywheel.ingest.models import Trajectory
from flywheel.ingest.services import IngestOptions, stream_ingest

pytestmark = pytest.mark.django_db
MB = 1 << 20


def big_line(n: int, chars: int) -> bytes:
    return json.dumps({"id": f"big{n}", "steps": [{"kind": "user", "text": "x" * chars}]}).encode() + b"\n"


def test_a_batch_is_flushed_at_its_byte_budget_before_its_record_count(settings, monkeypatch):
    settings.INGEST_BATCH_SIZE = 500
    settings.INGEST_BATCH_BYTES = 3 * MB
    sizes: list[int] = []
    real = services._store_batch

    def record_batch(batch, options, agents):
        sizes.append(len(batch))
        return real(batch, options, agents)

    monkeypatch.setattr(services, "_store_batch", record_batch)
    data = b"".join(big_line(n, MB) for n in range(10))
    report = stream_ingest(stream=io.BytesIO(data), options=IngestOptions(format="native"))
    assert report.stored == 10
    assert max(sizes) == 3 and sum(sizes) == 10, sizes


def test_a_gzip_bomb_of_one_record_is_rejected_as_too_large_without_inflating_it(settings):
    settings.INGEST_MAX_RECORD_BYTES = 1 * MB
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb") as out:
        out.write(b'{"id": "bomb", "steps": [{"kind": "user", "text": "')
        for _ in range(200):  # 200 MB once inflated, about 200 KB packed
            out.write(b"a" * MB)
        out.write(b'"}]}\n')
        out.write(big_line(1, 10))
    packed.seek(0)
    tracemalloc.start()
    report = stream_ingest(stream=packed, options=IngestOptions(format="native"))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.rejected == 1 and "larger than 1048576 bytes" in report.errors[0]["reason"]
    assert report.stored == 1 and Trajectory.objects.get().external_id == "big1"
    assert peak < 16 * MB, peak  # the record's cap and some buffers, never its 200 MB
