"""Queue rules as data: parsing their JSON (with errors that name the rule and condition) and matching facts.

No database: `queue_rules` is pure. The service that gathers facts and adds items is tested in
`test_queue_rule_arrivals.py`.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.core.exceptions import ValidationError

from flywheel.triage.queue_rules import (
    CONDITIONS,
    QueueRule,
    TrajectoryFacts,
    first_match,
    rules_json,
    rules_parse,
)
from flywheel.triage.suggestions import NEEDS_REVIEW

FACTS = TrajectoryFacts(
    agent="support-bot",
    outcome="failure",
    model_version="support-bot:v3",
    suggested=frozenset({"wrong_tool"}),
    thumbs_down=False,
    lowest_score=None,
    online_lowest={},
)


UNSAFE = {"online_score_below": {"scorer": "safety", "below": 1}}


def rule(**conditions: object) -> QueueRule:
    return QueueRule.from_json({"name": "r", **conditions})


@pytest.mark.parametrize(
    ("conditions", "facts", "expected"),
    [
        ({"outcome": "failure"}, FACTS, True),
        ({"outcome": "failure"}, replace(FACTS, outcome="success"), False),
        ({"model_version": "support-bot:v3"}, FACTS, True),
        ({"model_version": "support-bot:v3"}, replace(FACTS, model_version="support-bot:v31"), False),
        ({"model_version": "support-bot:v3*"}, replace(FACTS, model_version="support-bot:v31"), True),
        ({"model_version": "*:v?"}, FACTS, True),
        ({"model_version": "*:v?"}, replace(FACTS, model_version="support-bot:v10"), False),
        ({"model_version": "support-bot:*"}, replace(FACTS, model_version=""), False),
        ({"suggested_bucket": ["unsafe_action", "wrong_tool"]}, FACTS, True),
        ({"suggested_bucket": ["unsafe_action"]}, FACTS, False),
        ({"suggested_bucket": [NEEDS_REVIEW]}, replace(FACTS, suggested=frozenset({NEEDS_REVIEW})), True),
        ({"suggested_bucket": "wrong_tool"}, replace(FACTS, suggested=frozenset()), False),
        ({"negative_feedback": True}, replace(FACTS, thumbs_down=True), True),
        ({"negative_feedback": True}, replace(FACTS, lowest_score=0.0), False),  # scores need score_below
        ({"negative_feedback": {"score_below": 0.5}}, replace(FACTS, lowest_score=0.4), True),
        ({"negative_feedback": {"score_below": 0.5}}, replace(FACTS, lowest_score=0.5), False),
        ({"negative_feedback": {"score_below": 0.5}}, FACTS, False),  # no feedback at all
        ({"negative_feedback": {"thumbs_down": False, "score_below": 3}}, replace(FACTS, thumbs_down=True), False),
        ({"negative_feedback": {"thumbs_down": False, "score_below": 3}}, replace(FACTS, lowest_score=2), True),
        (UNSAFE, replace(FACTS, online_lowest={"safety": 0.0, "schema": 1.0}), True),
        (UNSAFE, replace(FACTS, online_lowest={"safety": 1.0, "schema": 0.0}), False),  # another scorer failed
        (UNSAFE, FACTS, False),  # not scored (yet)
        ({"online_score_below": {"scorer": "schema", "below": 0.5}}, replace(FACTS, online_lowest={"schema": 0.5}),
         False),
        ({"online_score_below": {"scorer": "schema", "below": 0.5}}, replace(FACTS, online_lowest={"schema": 0.4}),
         True),
    ],
)
def test_each_condition_kind_matches_and_does_not(conditions, facts, expected):
    assert rule(**conditions).matches(facts) is expected


def test_every_condition_of_a_rule_must_hold():
    both = rule(outcome="failure", model_version="support-bot:v2")
    assert not both.matches(FACTS)
    assert both.matches(replace(FACTS, model_version="support-bot:v2"))


def test_the_first_matching_rule_is_the_one_recorded():
    rules = rules_parse([{"name": "thumbs", "negative_feedback": True}, {"name": "fail", "outcome": "failure"},
                         {"name": "also fail", "outcome": "failure"}])  # fmt: skip
    assert first_match(rules, FACTS).name == "fail"
    assert first_match(rules, replace(FACTS, thumbs_down=True)).name == "thumbs"
    assert first_match(rules, replace(FACTS, outcome="success")) is None


def test_rules_go_back_to_the_json_they_came_from():
    data = [
        {"name": "thumbs on v3", "model_version": "support-bot:v3*",
         "negative_feedback": {"thumbs_down": True, "score_below": 0.5}},
        {"name": "unsafe", "outcome": "failure", "suggested_bucket": ["unsafe_action"]},
        {"name": "scored unsafe", "online_score_below": {"scorer": "safety", "below": 1.0}},
    ]  # fmt: skip
    assert rules_json(rules_parse(data)) == data
    assert rules_parse(rules_json(rules_parse(data))) == rules_parse(data)


def test_every_condition_kind_has_a_description():
    every = rule(outcome="failure", model_version="v*", suggested_bucket=["wrong_tool", NEEDS_REVIEW],
                 negative_feedback={"score_below": 2}, online_score_below={"scorer": "schema", "below": 1})  # fmt: skip
    assert [condition.KIND for condition in every.conditions] == list(CONDITIONS)
    assert every.describe() == (
        "outcome is failure and version matches v* and suggested wrong_tool or needs review"
        " and feedback with a thumbs down or a score below 2 and online schema score below 1"
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rules": []}, "a JSON list"),
        (["thumbs"], "a JSON object"),
        ([{"outcome": "failure"}], "needs a name"),
        ([{"name": "  ", "outcome": "failure"}], "needs a name"),
        ([{"name": "x" * 101, "outcome": "failure"}], "needs a name"),
        ([{"name": "empty"}], "rule 'empty' has no condition"),
        ([{"name": "r", "online_score_above": {"scorer": "safety", "below": 0.5}}], "unknown condition"),
        ([{"name": "r", "online_score_below": 0.5}], 'online_score_below must be {"scorer"'),
        ([{"name": "r", "online_score_below": {"scorer": "safety", "above": 1}}], "must be {"),
        ([{"name": "r", "online_score_below": {"scorer": "vibes", "below": 1}}],
         "rule 'r': online_score_below needs a scorer, one of safety, schema, catalogue"),
        ([{"name": "r", "online_score_below": {"below": 1}}], "needs a scorer"),
        ([{"name": "r", "online_score_below": {"scorer": "safety"}}], "needs a threshold: below must be a number"),
        ([{"name": "r", "online_score_below": {"scorer": "safety", "below": "1"}}], "below must be a number"),
        ([{"name": "r", "online_score_below": {"scorer": "safety", "below": float("inf")}}], "below must be a number"),
        ([{"name": "r", "online_score_below": {"scorer": "safety", "below": False}}], "below must be a number"),
        ([{"name": "r", "outcome": "failed"}], "rule 'r': outcome must be one of success, failure, unknown"),
        ([{"name": "r", "model_version": ""}], "rule 'r': model_version must be a version tag"),
        ([{"name": "r", "model_version": 3}], "model_version must be a version tag"),
        ([{"name": "r", "model_version": "v" * 101}], "at most 100"),
        ([{"name": "r", "suggested_bucket": []}], "suggested_bucket must be a list of bucket slugs"),
        ([{"name": "r", "suggested_bucket": [1]}], "suggested_bucket must be a list"),
        ([{"name": "r", "negative_feedback": False}], "negative_feedback must be true or"),
        ([{"name": "r", "negative_feedback": {"thumbs_down": False}}], "needs thumbs_down or score_below"),
        ([{"name": "r", "negative_feedback": {"score_below": "low"}}], "score_below must be a number"),
        ([{"name": "r", "negative_feedback": {"score_below": float("nan")}}], "score_below must be a number"),
        ([{"name": "r", "negative_feedback": {"score_below": True}}], "score_below must be a number"),
        ([{"name": "r", "negative_feedback": {"thumbs_down": "yes"}}], "thumbs_down must be true or false"),
        ([{"name": "r", "negative_feedback": {"below": 1}}], "negative_feedback must be true or"),
        ([{"name": "r", "outcome": "failure"}, {"name": "r", "outcome": "success"}], "two rules are named 'r'"),
        ([{"name": f"r{n}", "outcome": "failure"} for n in range(21)], "at most 20 rules"),
    ],
)
def test_bad_rules_are_refused_with_a_message_that_says_which_and_why(data, message):
    with pytest.raises(ValidationError) as refused:
        rules_parse(data)
    assert message in " ".join(refused.value.messages)


def test_no_rules_is_an_empty_list():
    assert rules_parse([]) == rules_parse(None) == []
