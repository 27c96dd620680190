from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from flywheel.core.roles import Role
from flywheel.ingest.selectors import TrajectoryFilters
from flywheel.ingest.services import feedback_add
from flywheel.monitoring.models import OnlineScore
from flywheel.triage import selectors, services
from flywheel.triage.models import BucketAssignment, Queue, QueueItem, Review, ReviewState
from flywheel.triage.queue_rules import rules_parse
from flywheel.triage.selectors import TriageFilters, queue_filters
from tests.flywheel.triage.conftest import call, result, shop_record, user

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def stored(store):
    return store(
        shop_record(
            "first", [user(), call("lookup_order", {"order_id": "1"}), result("lookup_order", "Error", error=True)]
        ),
        shop_record("second", [user(), {"kind": "assistant", "text": "No."}]),
        shop_record("fine", [user()], outcome="success"),
    )


@pytest.fixture
def reviewer(make_user):
    return make_user(Role.REVIEWER, "rita")


@pytest.fixture
def queue(reviewer, stored):
    filters = TriageFilters(base=TrajectoryFilters(outcome="failure"))
    return services.queue_create(actor=reviewer, name="failures", filters=filters)


def save_url(trajectory) -> str:
    return reverse("triage:review_save", kwargs={"trajectory_id": trajectory.pk})


def test_the_queue_list_shows_progress_and_offers_review_to_reviewers_only(client, make_user, queue):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("triage:queue")).content.decode()
    assert "failures" in page and "0 / 2" in page
    assert reverse("triage:queue_next", kwargs={"queue_id": queue.pk}) not in page
    client.force_login(make_user(Role.REVIEWER))
    assert (
        reverse("triage:queue_next", kwargs={"queue_id": queue.pk})
        in client.get(reverse("triage:queue")).content.decode()
    )


def test_a_reviewer_makes_a_queue_from_a_filter(client, reviewer, stored):
    client.force_login(reviewer)
    response = client.post(
        reverse("triage:queue_new"), {"name": "airline", "outcome": "failure", "reviewers": [reviewer.pk]}
    )
    queue = Queue.objects.get(name="airline")
    assert response.status_code == 302 and response["Location"] == reverse("triage:queue_detail", args=[queue.pk])
    assert queue.filters == {"outcome": "failure"} and list(queue.reviewers.all()) == [reviewer]
    refused = client.post(reverse("triage:queue_new"), {"name": "everything"})
    assert refused.status_code == 200 and b"Choose at least one filter" in refused.content


def test_editing_a_queue_starts_from_its_stored_filter(client, reviewer, queue):
    client.force_login(reviewer)
    page = client.get(reverse("triage:queue_edit", args=[queue.pk])).content.decode()
    assert '<option value="failure" selected>' in page
    client.post(
        reverse("triage:queue_edit", args=[queue.pk]), {"name": "failures", "outcome": "failure", "agent": "shop"}
    )
    queue.refresh_from_db()
    assert queue.filters == {"outcome": "failure", "agent": "shop"}


def test_next_claims_an_item_and_opens_its_review_page(client, reviewer, queue, stored):
    client.force_login(reviewer)
    response = client.post(reverse("triage:queue_next", args=[queue.pk]))
    assert response["Location"] == f"{reverse('triage:review', args=[stored['first'].pk])}?queue={queue.pk}"
    assert Review.objects.get(trajectory=stored["first"]).claimed_by == reviewer


def test_a_viewer_reads_the_review_page_but_cannot_change_anything(client, make_user, stored):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("triage:review", args=[stored["first"].pk])).content.decode()
    assert "unrecovered-tool-error" in page and "lookup_order returned an error" in page
    assert save_url(stored["first"]) not in page
    assert client.post(save_url(stored["first"]), {"bucket": ["wrong_tool"]}).status_code == 403
    assert not BucketAssignment.objects.exists()


def test_saving_in_a_queue_answers_htmx_with_the_next_item(client, reviewer, queue, stored):
    client.force_login(reviewer)
    client.post(reverse("triage:queue_next", args=[queue.pk]))
    data = {
        "bucket": ["incomplete_execution", "bad_planning"],
        "step-incomplete_execution": "2",
        "note": "n",
        "queue": queue.pk,
    }
    response = client.post(save_url(stored["first"]), data, **HTMX)
    assert response.status_code == 200
    assert f'data-trajectory="{stored["second"].pk}"' in response.content.decode()
    assert response["HX-Push-Url"].startswith(
        f"{reverse('triage:review', args=[stored['second'].pk])}?queue={queue.pk}"
    )
    rows = {
        a.bucket.slug: (a.step_index, a.source) for a in BucketAssignment.objects.filter(trajectory=stored["first"])
    }
    assert rows == {"incomplete_execution": (2, "suggestion"), "bad_planning": (None, "human")}
    assert Review.objects.get(trajectory=stored["second"]).claimed_by == reviewer


def test_skipping_the_last_item_shows_the_queue_is_done(client, reviewer, queue, stored):
    client.force_login(reviewer)
    services.review_submit(actor=reviewer, trajectory=stored["first"], choices=[])
    response = client.post(save_url(stored["second"]), {"action": "skip", "queue": queue.pk}, **HTMX)
    assert b"failures is done" in response.content
    assert response["HX-Push-Url"] == reverse("triage:queue_detail", args=[queue.pk])
    assert Review.objects.get(trajectory=stored["second"]).state == ReviewState.SKIPPED


def test_without_javascript_saving_redirects_to_the_next_item(client, reviewer, queue, stored):
    client.force_login(reviewer)
    response = client.post(save_url(stored["first"]), {"queue": queue.pk})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("triage:review", args=[stored["second"].pk]))


def test_a_bad_step_is_refused_with_a_reason(client, reviewer, stored):
    client.force_login(reviewer)
    response = client.post(save_url(stored["second"]), {"bucket": ["wrong_tool"], "step-wrong_tool": "99"}, **HTMX)
    assert response.status_code == 400 and b"step #99 is not in this trajectory" in response.content


def test_stored_text_is_escaped_on_the_review_page_and_the_list(client, reviewer, store):
    script = "<script>window.pwned = 1</script>"
    stored = store(shop_record("x", [user(script), {"kind": "assistant", "text": script}]))
    services.review_submit(actor=reviewer, trajectory=stored["x"], choices=[], note=script)
    client.force_login(reviewer)
    for url in (reverse("triage:review", args=[stored["x"].pk]), reverse("triage:trajectory_list") + "?q=pwned"):
        page = client.get(url).content.decode()
        assert script not in page
    assert (
        "&lt;script&gt;window.pwned = 1&lt;/script&gt;"
        in client.get(reverse("triage:review", args=[stored["x"].pk])).content.decode()
    )


# --- the list and its bulk actions --------------------------------------------------------------


def test_the_list_shows_states_buckets_and_suggestions_and_filters(client, make_user, stored):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("triage:trajectory_list"), {"suggested": "incomplete_execution"}).content.decode()
    assert ">first<" in page and ">second<" not in page and "Incomplete execution" in page
    assert 'name="ids"' not in page  # viewers get no bulk actions


def listed(client, **query) -> set[str]:
    page = client.get(reverse("triage:trajectory_list"), query).content.decode()
    return set(re.findall(r"/review/[^\"]+\">([a-z-]+)</a>", page))


def test_the_list_filters_by_online_score_and_by_feedback(client, make_user, stored):
    OnlineScore.objects.create(trajectory=stored["first"], scorer="safety", value=0.0, passed=False)
    OnlineScore.objects.create(trajectory=stored["second"], scorer="safety", value=1.0, passed=True)
    viewer = make_user(Role.VIEWER)
    feedback_add(trajectory=stored["fine"], value="down", sent_by=viewer)
    feedback_add(trajectory=stored["second"], value="up", sent_by=viewer)
    client.force_login(viewer)
    assert listed(client) == {"first", "second", "fine"}
    assert listed(client, online_scorer="safety") == {"first"}  # no threshold: below 1, the scorer failed it
    assert listed(client, online_scorer="safety", online_below="2") == {"first", "second"}
    assert listed(client, feedback="down") == {"fine"}
    assert listed(client, feedback="any", online_scorer="safety", online_below="2") == {"second"}


def test_a_threshold_without_a_scorer_is_shown_as_an_error(client, make_user, stored):
    client.force_login(make_user(Role.VIEWER))
    page = client.get(reverse("triage:trajectory_list"), {"online_below": "0.5"}).content.decode()
    assert "Choose the scorer whose score must be below the threshold." in page


def test_the_lists_queries_do_not_grow_with_its_rows(client, make_user, store):
    """Keyset pages of 50, each row's review, buckets, suggestions and scores read in bounded queries."""
    viewer = make_user(Role.VIEWER)
    client.force_login(viewer)
    query = {"online_scorer": "schema", "feedback": "any"}

    def page_queries(count: int) -> int:
        steps = [user(), call("refund_order", {"order_id": "1"})]
        records = [shop_record(f"r{count}-{n}", steps) for n in range(count)]
        for trajectory in store(*records).values():
            OnlineScore.objects.create(trajectory=trajectory, scorer="schema", value=0.0, passed=False)
            feedback_add(trajectory=trajectory, value="down", sent_by=viewer)
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("triage:trajectory_list"), query).status_code == 200
        return len(queries)

    assert page_queries(2) == page_queries(8)


def bulk(client, query: str = "", **data):
    return client.post(reverse("triage:bulk"), {"query": query, **data})


def test_bulk_set_bucket_on_the_selected_rows(client, reviewer, stored):
    client.force_login(reviewer)
    ids = [stored["first"].pk, stored["fine"].pk]
    response = bulk(
        client, "outcome=failure", action="set_bucket", target_bucket="wrong_tool", scope="selected", ids=ids
    )
    assert response["Location"] == reverse("triage:trajectory_list") + "?outcome=failure"
    assert set(BucketAssignment.objects.values_list("trajectory__external_id", flat=True)) == {"first", "fine"}


def test_bulk_mark_reviewed_on_everything_matching_the_filter(client, reviewer, stored):
    client.force_login(reviewer)
    bulk(client, "outcome=failure", action="mark_reviewed", scope="all")
    reviewed = Review.objects.filter(state=ReviewState.REVIEWED).values_list("trajectory__external_id", flat=True)
    assert sorted(reviewed) == ["first", "second"]


def test_bulk_add_to_queue(client, reviewer, queue, stored):
    client.force_login(reviewer)
    bulk(client, action="add_to_queue", target_queue=queue.pk, scope="selected", ids=[stored["fine"].pk])
    assert QueueItem.objects.get(queue=queue).trajectory == stored["fine"]


def test_a_bulk_action_without_its_target_or_selection_changes_nothing(client, reviewer, stored):
    client.force_login(reviewer)
    response = bulk(client, action="set_bucket", scope="selected", ids=[stored["first"].pk])
    assert response.status_code == 302
    assert bulk(client, action="mark_reviewed", scope="selected").status_code == 302
    assert not BucketAssignment.objects.exists() and not Review.objects.filter(state=ReviewState.REVIEWED).exists()


def test_a_viewer_cannot_bulk_change(client, make_user, stored):
    client.force_login(make_user(Role.VIEWER))
    assert bulk(client, action="mark_reviewed", scope="all").status_code == 403
    assert not Review.objects.filter(state=ReviewState.REVIEWED).exists()


# --- queue rules and removal ------------------------------------------------------------------


def rule_fields(*rules: dict, initial: int = 0) -> dict:
    """The rules formset as the queue page posts it: one form per rule, plus an empty one."""
    data = {"rules-TOTAL_FORMS": len(rules) + 1, "rules-INITIAL_FORMS": initial}
    for number, rule in enumerate(rules):
        data.update({f"rules-{number}-{key}": value for key, value in rule.items()})
    return data


def test_a_reviewer_makes_a_queue_of_rules_alone_and_its_page_shows_them(client, reviewer, stored):
    client.force_login(reviewer)
    rules = rule_fields({"name": "unhappy v3", "model_version": "shop:v3*", "thumbs_down": "on", "score_below": "0.5"},
                        {"name": "unsafe", "suggested_bucket": ["unsafe_action", "needs-review"]})  # fmt: skip
    response = client.post(reverse("triage:queue_new"), {"name": "by rules", **rules})
    queue = Queue.objects.get(name="by rules")
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert queue.filters == {} and queue.rules == [
        {"name": "unhappy v3", "model_version": "shop:v3*",
         "negative_feedback": {"thumbs_down": True, "score_below": 0.5}},
        {"name": "unsafe", "suggested_bucket": ["unsafe_action", "needs-review"]},
    ]  # fmt: skip
    page = client.get(reverse("triage:queue_detail", args=[queue.pk])).content.decode()
    assert "version matches shop:v3* and feedback with a thumbs down or a score below 0.5" in page
    assert "suggested unsafe_action or needs review" in page
    assert "rules apply to trajectories that arrive after the rule is saved" in page
    edit = client.get(reverse("triage:queue_edit", args=[queue.pk])).content.decode()
    assert 'value="shop:v3*"' in edit and 'value="0.5"' in edit and 'value="unsafe"' in edit
    assert "Rules apply to trajectories that arrive after the rule is saved" in edit


def test_a_rule_on_an_online_score_is_saved_shown_and_offered_back_for_editing(client, reviewer, stored):
    client.force_login(reviewer)
    rules = rule_fields({"name": "unsafe", "online_scorer": "safety", "online_below": "1"})
    response = client.post(reverse("triage:queue_new"), {"name": "scored", **rules})
    assert response.status_code == 302, response.content.decode()[-2000:]
    queue = Queue.objects.get(name="scored")
    assert queue.rules == [{"name": "unsafe", "online_score_below": {"scorer": "safety", "below": 1.0}}]
    page = client.get(reverse("triage:queue_detail", args=[queue.pk])).content.decode()
    assert "online safety score below 1" in page
    edit = client.get(reverse("triage:queue_edit", args=[queue.pk])).content.decode()
    assert '<option value="safety" selected>' in edit and 'name="rules-0-online_below" value="1.0"' in edit


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        ({"name": "r", "online_scorer": "vibes", "online_below": "1"}, "Select a valid choice"),
        ({"name": "r", "online_scorer": "safety"}, "online_score_below needs a threshold"),
        ({"name": "r", "online_below": "0.5"}, "online_score_below needs a scorer, one of safety, schema"),
        ({"name": "r", "online_scorer": "safety", "online_below": "low"}, "Enter a number."),
        ({"thumbs_down": "on"}, "a rule needs a name"),
        ({"name": "nothing"}, "rule &#x27;nothing&#x27; has no condition"),
        ({"name": "r", "score_below": "low"}, "Enter a number."),
        ({"name": "r", "outcome": "failed"}, "Select a valid choice"),
        ({"name": "r", "suggested_bucket": ["no_such_bucket"]}, "Select a valid choice"),
    ],
)
def test_a_bad_rule_is_shown_with_its_error_and_nothing_is_saved(client, reviewer, stored, rule, error):
    client.force_login(reviewer)
    response = client.post(reverse("triage:queue_new"), {"name": "bad", "outcome": "failure", **rule_fields(rule)})
    assert response.status_code == 200 and error in response.content.decode()
    assert not Queue.objects.filter(name="bad").exists()


def test_two_rules_of_one_name_are_refused_on_top_of_the_rules(client, reviewer, stored):
    client.force_login(reviewer)
    rules = rule_fields({"name": "twice", "outcome": "failure"}, {"name": "twice", "outcome": "success"})
    response = client.post(reverse("triage:queue_new"), {"name": "bad", **rules})
    assert response.status_code == 200 and "two rules are named &#x27;twice&#x27;" in response.content.decode()
    assert not Queue.objects.exists()


def test_editing_changes_or_deletes_rules_and_a_post_without_rule_fields_keeps_them(client, reviewer, queue):
    client.force_login(reviewer)
    url = reverse("triage:queue_edit", args=[queue.pk])
    two = rule_fields({"name": "a", "outcome": "failure"}, {"name": "b", "thumbs_down": "on"})
    client.post(url, {"name": "failures", "outcome": "failure", **two})
    queue.refresh_from_db()
    assert [rule["name"] for rule in queue.rules] == ["a", "b"]
    client.post(url, {"name": "failures", "outcome": "failure"})  # an older client: no rule fields at all
    queue.refresh_from_db()
    assert [rule["name"] for rule in queue.rules] == ["a", "b"]
    deleted = {"name": "a", "outcome": "failure", "DELETE": "on"}
    client.post(url, {"name": "failures", "outcome": "failure",
                      **rule_fields(deleted, {"name": "b", "thumbs_down": "on"}, initial=2)})  # fmt: skip
    queue.refresh_from_db()
    assert queue.rules == [{"name": "b", "negative_feedback": {"thumbs_down": True, "score_below": None}}]
    emptied = client.post(url, {"name": "failures", **rule_fields({"name": "b", "DELETE": "on"}, initial=1)})
    assert "Choose at least one filter or rule" in emptied.content.decode()


def test_the_queue_page_says_why_each_item_is_there_and_offers_removal(client, make_user, reviewer, queue, stored):
    services.queue_update(actor=reviewer, queue=queue, name=queue.name, filters=queue_filters(queue), reviewers=[],
                          rules=rules_parse([{"name": "successes", "outcome": "success"}]))  # fmt: skip
    services.queue_rules_apply(trajectory_ids=[stored["fine"].pk])
    services.queue_items_add(actor=reviewer, queue=queue, trajectory_ids=[stored["first"].pk])
    client.force_login(reviewer)
    page = client.get(reverse("triage:queue_detail", args=[queue.pk])).content.decode()
    why = dict(re.findall(r'>([a-z]+)</a></td>.*?<td class="reasons">(.*?)</td>', page, flags=re.DOTALL))
    assert why == {"fine": "rule “successes”", "first": "added by hand by rita; matches the filter",
                   "second": "matches the filter"}  # fmt: skip
    remove = reverse("triage:queue_item_remove", args=[queue.pk, stored["second"].pk])
    assert remove in page
    client.force_login(make_user(Role.VIEWER))
    assert remove not in client.get(reverse("triage:queue_detail", args=[queue.pk])).content.decode()


def test_removing_from_the_queue_page_takes_the_item_out_for_good(client, reviewer, queue, stored):
    client.force_login(reviewer)
    url = reverse("triage:queue_item_remove", args=[queue.pk, stored["second"].pk])
    response = client.post(url, follow=True)
    assert "removed from failures" in response.content.decode()
    assert set(selectors.queue_members(queue, viewer=reviewer)) == {stored["first"]}
    again = client.post(url, follow=True)
    assert again.status_code == 200 and QueueItem.objects.filter(queue=queue).count() == 1
    outside = client.post(reverse("triage:queue_item_remove", args=[queue.pk, stored["fine"].pk]), follow=True)
    assert "is not in queue failures" in outside.content.decode()
    assert client.get(url).status_code == 405
