"""Twenty people on the app at once: reviewers browsing and triaging, and agents posting trajectories.

Run by `bench/load/run.py` (headless, a bounded run, CSV out, 127.0.0.1 only) against a database
`bench/load/generate.py` filled; it reads the logins and ids that wrote (LOAD_CREDENTIALS). Each
request is named after the page it measures, so the CSV has a row per page:

- `Reviewer` (most users): the triage list with a filter (outcome, agent, bucket, suggested,
  review state, tool, version), the next claimed item of a queue (claim, its review page, saving
  it), the trajectory list with each filter and text search, the trace viewer of a long
  trajectory, the dashboards and the home page;
- `Agent`: batches of tau-bench-shaped trajectories (new ids) posted to `POST /api/v1/trajectories`
  with an ingest token; how many were stored is written to LOAD_INGEST_OUT when the run stops.

Not covered: uploads through the browser, jobs and the registry's pages.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import time
import uuid
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from locust import HttpUser, between, events, task

CREDENTIALS = json.loads(Path(os.environ["LOAD_CREDENTIALS"]).read_text())
TAU = Path(__file__).resolve().parents[3] / "shared" / "external" / "tau_bench" / "gpt-4o-airline.json"
BATCH = int(os.environ.get("LOAD_INGEST_BATCH", "100"))
SEARCH_TERMS = ["reservation", "baggage", "cancel", "refund", "gold member", "timed out", "triangle", "calendar"]
BUCKETS = ["format_error", "hallucinated_api", "incomplete_execution", "wrong_tool", "bad_planning"]
_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_SIGN_INS = itertools.count()
_INGESTED = {"stored": 0, "posted": 0, "started": 0.0, "stopped": 0.0}


def _tau_messages() -> list[list[dict[str, Any]]]:
    conversations = []
    for record in json.loads(TAU.read_text()):
        messages = record["traj"][:12]
        messages[0] = {**messages[0], "content": messages[0]["content"][:600]}
        while messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
            messages.pop()
        conversations.append(messages)
    return conversations


CONVERSATIONS = _tau_messages()


class Reviewer(HttpUser):
    weight = 17
    wait_time = between(0.5, 2.0)

    def on_start(self) -> None:
        reviewers = CREDENTIALS["reviewers"]
        self.username = reviewers[next(_SIGN_INS) % len(reviewers)]
        page = self.client.get("/accounts/login/", name="login page")
        token = _CSRF_INPUT.search(page.text)
        self.client.post(
            "/accounts/login/",
            data={
                "username": self.username,
                "password": CREDENTIALS["password"],
                "csrfmiddlewaretoken": token.group(1) if token else "",
            },
            name="login",
        )

    def _csrf(self) -> str:
        return self.client.cookies.get("csrftoken", "")

    @task(4)
    def triage_list(self) -> None:
        name, value = random.choice(
            [
                ("outcome", "failure"),
                ("agent", random.choice(CREDENTIALS["agents"])),
                ("bucket", random.choice(BUCKETS)),
                ("suggested", random.choice([*BUCKETS[:3], "needs-review"])),
                ("state", random.choice(["unreviewed", "reviewed"])),
                ("tool", random.choice(CREDENTIALS["tools"])),
                ("model_version", random.choice(CREDENTIALS["versions"]["airline"])),
            ]
        )
        self.client.get("/triage/trajectories/", params={name: value}, name=f"triage list: {name}")

    @task(3)
    def review_next(self) -> None:
        """Claim the next item of the shared queue, open its review page, save it with a bucket."""
        queue = CREDENTIALS["queues"]["airline failures"]
        with self.client.post(
            f"/triage/queues/{queue}/next/",
            data={"csrfmiddlewaretoken": self._csrf()},
            headers={"X-CSRFToken": self._csrf()},
            allow_redirects=False,
            name="review: claim next",
            catch_response=True,
        ) as claimed:
            location = claimed.headers.get("Location", "")
            if claimed.status_code != 302 or "/triage/review/" not in location:
                claimed.failure(f"no item claimed: {claimed.status_code} {location}")
                return
            claimed.success()
        self.client.get(location, name="review page")
        trajectory_id = location.split("/triage/review/")[1].split("/")[0]
        self.client.post(
            f"/triage/review/{trajectory_id}/save/",
            data={
                "csrfmiddlewaretoken": self._csrf(),
                "action": "save",
                "bucket": random.choice(BUCKETS),
                "queue": queue,
            },
            headers={"X-CSRFToken": self._csrf()},
            allow_redirects=False,
            name="review: save",
        )

    @task(5)
    def trajectory_list(self) -> None:
        today = date.today()
        name, value = random.choice(
            [
                ("outcome", random.choice(["failure", "success", "unknown"])),
                ("agent", random.choice(CREDENTIALS["agents"])),
                ("model_version", random.choice(CREDENTIALS["versions"][random.choice(CREDENTIALS["agents"])])),
                ("tool", random.choice(CREDENTIALS["tools"])),
                ("error", "true"),
                ("since", (today - timedelta(days=random.randint(1, 60))).isoformat()),
                ("until", (today - timedelta(days=random.randint(30, 80))).isoformat()),
                ("q", random.choice(SEARCH_TERMS)),
                ("feedback", random.choice(["down", "up", "any"])),
                ("none", ""),
            ]
        )
        params = {name: value} if name != "none" else {}
        self.client.get("/trajectories/", params=params, name=f"trajectory list: {name}")

    @task(2)
    def trace_viewer(self) -> None:
        trajectory = random.choice(CREDENTIALS["long_trajectories"])
        self.client.get(f"/trajectories/{trajectory}/", name="trace viewer (long)")

    @task(1)
    def dashboards(self) -> None:
        self.client.get("/dashboards/", name="dashboards")

    @task(1)
    def home(self) -> None:
        self.client.get("/", name="home")


class Agent(HttpUser):
    """An agent in production, posting what it did in batches as fast as the app takes them."""

    weight = 3
    wait_time = between(0.0, 0.1)

    @task
    def post_batch(self) -> None:
        tag = random.choice(CREDENTIALS["versions"]["airline"][-2:])
        batch = [
            {
                "id": f"load-{uuid.uuid4()}",
                "messages": random.choice(CONVERSATIONS),
                "outcome": random.random() > 0.4,
                "model_version": tag,
            }
            for _ in range(BATCH)
        ]
        with self.client.post(
            "/api/v1/trajectories?format=openai-chat&agent=airline",
            json=batch,
            name="ingest API (batch)",
            headers={"Authorization": f"Bearer {CREDENTIALS['ingest_token']}"},
            catch_response=True,
        ) as answer:
            if answer.status_code != 207:
                answer.failure(f"{answer.status_code}: {answer.text[:200]}")
                return
            results = answer.json()["results"]
            stored = sum(1 for item in results if item.get("status") == "stored")
            if stored != len(batch):
                answer.failure(f"{len(batch) - stored} of {len(batch)} not stored")
            _INGESTED["stored"] += stored
            _INGESTED["posted"] += len(batch)


@events.test_start.add_listener
def _started(**kwargs: Any) -> None:
    _INGESTED["started"] = time.monotonic()


@events.test_stop.add_listener
def _stopped(**kwargs: Any) -> None:
    _INGESTED["stopped"] = time.monotonic()
    out = os.environ.get("LOAD_INGEST_OUT")
    if out:
        Path(out).write_text(json.dumps(_INGESTED))
