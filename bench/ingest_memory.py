"""Peak worker memory for an upload of a few huge records, gzipped (prints, asserts nothing).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/ingest_memory.py
        [--records 40] [--megabytes 15] [--database flywheel_bench_memory]

1. Writes RECORDS native trajectories of MEGABYTES MB each (one long, compressible user message)
   into one gzipped JSONL file: a few hundred KB on disk, RECORDS x MEGABYTES once inflated.
2. In a child process (so its peak RSS is its own) on a fresh PostgreSQL database, stores it as an
   upload and runs `upload_process`, the body of the Celery task a worker runs.
Prints the file sizes, the child's RSS before processing (Django and the app loaded) and its
peak, against the target (peak < 400 MB). `bench/ingest.py` keeps the throughput and the
10k-vs-100k flat-memory figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import REPO, fresh_database  # noqa: E402  (bench/ingest.py, beside this file)

MB = 1_000_000
TARGET_MB = 400


def generate(path: Path, records: int, megabytes: int) -> None:
    phrase = "the parcel left the warehouse and is on its way; "
    with gzip.open(path, "wt", compresslevel=6) as out:
        for n in range(records):
            head = json.dumps({"id": f"huge-{n}", "steps": [{"kind": "user", "text": ""}]})[:-4]
            body = (f"{n}: {phrase}" * (megabytes * MB // len(phrase) + 1))[: megabytes * MB - len(head) - 4]
            out.write(head + body + '"}]}\n')


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_upload(path: str, database_url: str, media_root: str) -> None:
    """Runs in its own process: store the file as an upload, process it, print the figures as JSON."""
    os.environ.update(DATABASE_URL=database_url, MEDIA_ROOT=media_root, CELERY_BROKER_URL="memory://")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "flywheel.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.files import File

    from flywheel.ingest.services import upload_create, upload_process

    user = User.objects.create_superuser(username="bench")  # an admin: a member of every agent
    with open(path, "rb") as handle:
        upload = upload_create(user=user, file=File(handle, name="huge.jsonl.gz"), format="native", mapping={})
    before = peak_rss_mb()
    started = time.perf_counter()
    done = upload_process(upload_id=upload.id)
    seconds = time.perf_counter() - started
    assert done is not None
    print(json.dumps({"status": done.status, "stored": done.stored, "rejected": done.rejected, "seconds": seconds,
                      "first_error": (done.errors or [{}])[0].get("reason", ""),
                      "before_mb": before, "peak_mb": peak_rss_mb()}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=40)
    parser.add_argument("--megabytes", type=int, default=15)
    parser.add_argument("--database", default="flywheel_bench_memory", help="the scratch database (recreated)")
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL", "")
    if not database_url.startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL server (the benchmark creates its own database there)")
    if not args.database.isidentifier():
        sys.exit("--database must be a plain identifier")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "huge.jsonl.gz"
        generate(path, args.records, args.megabytes)
        url = fresh_database(database_url, args.database)
        command = [sys.executable, __file__, "--child", str(path), url, str(Path(folder) / "media")]
        run = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        if run.returncode:
            sys.exit(f"the child failed:\n{run.stderr[-3000:]}")
        result = json.loads(run.stdout.strip().splitlines()[-1])
        packed_kb = path.stat().st_size / 1000
    print(f"upload                  {args.records} records of {args.megabytes} MB, gzipped to {packed_kb:.0f} KB")
    print(f"outcome                 {result['status']}: {result['stored']} stored, {result['rejected']} rejected"
          f" in {result['seconds']:.1f} s {result['first_error']}")  # fmt: skip
    print(f"worker RSS before       {result['before_mb']:8.1f} MB   (Django and the app loaded)")
    print(f"worker peak RSS         {result['peak_mb']:8.1f} MB   (target < {TARGET_MB})")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child_upload(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        main()
