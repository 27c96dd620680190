"""The environment contract's shared parts: judgements as verdict lines, playing recorded calls and a model output."""

from __future__ import annotations

from trainer.contracts import ExpectedCall, ToolCall, Verdict
from trainer.environments.base import Judgement, Refusal
from trainer.verifiers.base import UNPARSEABLE_REASON

DELETE_256 = ExpectedCall.exact("calendar_delete_event", {"event_id": "00000256"})


def test_a_judgement_is_a_verdict_line_with_the_episodes_fields():
    judgement = Judgement("t", 1.0, True, "ok", {"execution_success": 1.0}, turns=2, execution_success=True)
    assert judgement.verdict() == Verdict("t", 1.0, True, {"execution_success": 1.0}, "ok", [])
    assert judgement.to_json() == {
        "id": "t",
        "reward": 1.0,
        "passed": True,
        "components": {"execution_success": 1.0},
        "reason": "ok",
        "violations": [],
        "execution_success": True,
        "turns": 2,
        "truncated": False,
    }


def test_a_judgement_from_a_verdict_keeps_its_reward_and_violations():
    verdict = Verdict("t", 0.8, False, {"tool": 0.4, "arguments": 0.4}, "unsafe", ["sql-drop"])
    judgement = Judgement.from_verdict(verdict, turns=1)
    assert judgement.verdict() == verdict and judgement.execution_success is None


def test_playing_calls_reports_the_first_refused_one_and_still_plays_the_rest(environment, make_task):
    search = ToolCall("calendar_search_events", {"query": "sync"})
    missing = ToolCall("calendar_delete_event", {"event_id": "99999999"})
    also_missing = ToolCall("calendar_delete_event", {"event_id": "99999998"})
    delete = ToolCall("calendar_delete_event", {"event_id": "00000256"})
    played = environment.play_calls(make_task(DELETE_256), [search, missing, also_missing, delete])
    assert played.refused == Refusal(2, missing, played.refused.result)
    assert not played.refused.result.ok and played.refused.result.observation == "Event not found."
    # The refused calls do not stop the episode: the last call still runs and reaches the end state.
    assert played.judgement.passed and played.judgement.turns == 4
    assert environment.run_calls(make_task(DELETE_256), [search, missing, also_missing, delete]) == played.judgement


def test_playing_calls_that_all_run_reports_no_refusal(environment, make_task):
    delete = ToolCall("calendar_delete_event", {"event_id": "00000256"})
    played = environment.play_calls(make_task(DELETE_256), [delete])
    assert played.refused is None and played.judgement.passed


def test_an_output_of_several_workbench_calls_is_played_in_order(environment, make_task):
    output = ["calendar.search_events.func(query='sync')", 'calendar.delete_event.func(event_id="00000256")']
    judgement = environment.run_output(make_task(DELETE_256), output)
    assert judgement.passed and judgement.turns == 2


def test_raw_text_holding_several_calls_is_played_too(environment, make_task):
    text = (
        'First I look.\n{"name": "calendar_search_events", "arguments": {"query": "sync"}}\n'
        '{"name": "calendar_delete_event", "arguments": {"event_id": "00000256"}}'
    )
    assert environment.run_output(make_task(DELETE_256), text).turns == 2


def test_an_unreadable_output_runs_nothing_and_says_so(environment, make_task):
    judgement = environment.run_output(make_task(), '{"name": "calendar_delete_event", "arguments": {broken')
    assert not judgement.passed and judgement.turns == 0
    assert judgement.reason.startswith(UNPARSEABLE_REASON)


def test_an_answer_with_no_call_is_an_episode_without_calls(environment, make_task):
    assert environment.run_output(make_task(), "Nothing needs doing.").passed
