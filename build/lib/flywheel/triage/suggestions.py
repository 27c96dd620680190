"""The suggestion rules: which failure bucket a trajectory probably belongs in, why, and at which step.

Every rule lives here and is a pure function over `TraceFacts` (no database). A rule yields
`Suggested` items naming the rule id, a bucket slug (None for "needs review") and a sentence
for the reviewer. Rules:

- `invalid-arguments` (format error): a tool call whose arguments trainer's parser cannot read
  as a JSON object;
- `missing-required-arguments` (format error): a call that leaves out an argument the agent's
  tool schema lists as `required`. Inferred catalogues record no `required`, so this fires only
  for agents whose schemas were declared (uploaded, or sent with the trajectories);
- `unknown-tool` / `unknown-argument` (hallucinated API): a call to a tool outside the agent's
  catalogue, or with an argument its schema does not define. An inferred catalogue holds every
  tool and argument ever observed, so these too fire in practice only for declared catalogues;
- `safety/<policy rule>` (unsafe action): a call that trainer's safety policy denies;
- `unrecovered-tool-error` (incomplete execution): in a trajectory that did not succeed, a tool
  result that is an error, with no later successful result from the same tool;
- `needs-review` (no bucket): a failed trajectory where none of the above fired.

Not covered: wrong tool, bad planning and retrieval failures need judgement. The rewards app's
LLM judge may suggest them (`flywheel.rewards.buckets`, rule `llm_judge`); those suggestions are
stored when its job ends and the rules here leave them in place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from trainer.contracts import ToolCall
from trainer.parsing import parse_tool_calls
from trainer.verifiers.safety import SafetyPolicy, check_calls

NEEDS_REVIEW = "needs-review"
LLM_JUDGE = "llm_judge"  # the rule name of the LLM judge's suggestions, which these rules never replace
QUOTE_CHARS = 120


@dataclass(frozen=True)
class StepFacts:
    """What the rules read of one step."""

    index: int
    kind: str
    tool_name: str = ""
    tool_arguments: Any = None
    tool_arguments_raw: str = ""
    tool_call_id: str = ""
    is_error: bool = False
    text: str = ""


@dataclass(frozen=True)
class TraceFacts:
    outcome: str
    steps: Sequence[StepFacts]
    # The agent's catalogue in OpenAI tools form; empty when the agent has none recorded.
    tools: Sequence[dict[str, Any]] = ()
    policy: SafetyPolicy = field(default_factory=SafetyPolicy.default)

    @cached_property
    def schemas(self) -> dict[str, dict[str, Any]]:
        return {tool["function"]["name"]: tool["function"].get("parameters") or {} for tool in self.tools}

    @cached_property
    def calls(self) -> list[ReadCall]:
        """Every tool call step, read once by trainer's parser for all the rules."""
        return [_read(step) for step in self.steps if step.kind == "tool_call"]


@dataclass(frozen=True)
class ReadCall:
    step: StepFacts
    call: ToolCall | None  # None when the parser could not read it
    error: str = ""


def _read(step: StepFacts) -> ReadCall:
    arguments = step.tool_arguments_raw or step.tool_arguments
    if isinstance(arguments, str) and not step.tool_arguments_raw:
        # A JSON string as the whole arguments: re-encode it so the parser reports a string, not bad JSON.
        arguments = json.dumps(arguments)
    result = parse_tool_calls({"name": step.tool_name, "arguments": arguments})
    if not result.ok or len(result.calls) != 1:
        return ReadCall(step, None, result.error or "the call could not be read")
    return ReadCall(step, result.calls[0])


@dataclass(frozen=True)
class Suggested:
    rule: str
    bucket: str | None  # a built-in bucket's slug; None means "needs review"
    reason: str
    step_index: int | None = None


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= QUOTE_CHARS else flat[: QUOTE_CHARS - 1] + "…"


def invalid_arguments(facts: TraceFacts) -> Iterator[Suggested]:
    for read in facts.calls:
        if read.call is None:
            yield Suggested(
                "invalid-arguments", "format_error", f"Step #{read.step.index}: {read.error}.", read.step.index
            )


def missing_required_arguments(facts: TraceFacts) -> Iterator[Suggested]:
    for read in facts.calls:
        required = facts.schemas.get(read.step.tool_name, {}).get("required") or []
        missing = [name for name in required if read.call is not None and name not in read.call.arguments]
        if missing:
            reason = (
                f"Step #{read.step.index}: {read.step.tool_name} is called without {', '.join(missing)}, "
                "required by the agent's declared tool schema."
            )
            yield Suggested("missing-required-arguments", "format_error", reason, read.step.index)


def unknown_tool(facts: TraceFacts) -> Iterator[Suggested]:
    if not facts.schemas:
        return
    known = ", ".join(sorted(facts.schemas)[:8]) + ("…" if len(facts.schemas) > 8 else "")
    for read in facts.calls:
        if read.step.tool_name not in facts.schemas:
            reason = f"Step #{read.step.index}: {read.step.tool_name!r} is not in the agent's tool catalogue ({known})."
            yield Suggested("unknown-tool", "hallucinated_api", reason, read.step.index)


def unknown_argument(facts: TraceFacts) -> Iterator[Suggested]:
    for read in facts.calls:
        schema = facts.schemas.get(read.step.tool_name)
        # Schemas without `properties` say nothing about argument names; explicit extras are allowed.
        if read.call is None or not schema or "properties" not in schema or schema.get("additionalProperties"):
            continue
        unknown = sorted(set(read.call.arguments) - set(schema["properties"]))
        if unknown:
            reason = (
                f"Step #{read.step.index}: {read.step.tool_name} has no argument {', '.join(unknown)} in its schema."
            )
            yield Suggested("unknown-argument", "hallucinated_api", reason, read.step.index)


def unsafe_action(facts: TraceFacts) -> Iterator[Suggested]:
    readable = [read for read in facts.calls if read.call is not None]
    for violation in check_calls(facts.policy, [read.call for read in readable if read.call is not None]):
        step = readable[violation.call_index].step
        reason = (
            f"Step #{step.index}: {violation.tool} breaks rule {violation.rule_id} "
            f"of the {facts.policy.name!r} safety policy: {violation.detail}."
        )
        yield Suggested(f"safety/{violation.rule_id}", "unsafe_action", reason, step.index)


def _result_tool(step: StepFacts, calls_by_id: dict[str, str], last_call: str) -> str:
    return step.tool_name or calls_by_id.get(step.tool_call_id, "") or last_call


def unrecovered_tool_error(facts: TraceFacts) -> Iterator[Suggested]:
    """The first tool error that no later success of the same tool made good; once per trajectory."""
    if facts.outcome == "success":
        return
    calls_by_id: dict[str, str] = {}
    last_call = ""
    results: list[tuple[StepFacts, str]] = []
    for step in facts.steps:
        if step.kind == "tool_call":
            calls_by_id[step.tool_call_id] = last_call = step.tool_name
        elif step.kind == "tool_result":
            results.append((step, _result_tool(step, calls_by_id, last_call)))
    for position, (step, tool) in enumerate(results):
        recovered = any(name == tool and not later.is_error for later, name in results[position + 1 :])
        if step.is_error and not recovered:
            unrecovered = sum(1 for later, name in results[position:] if later.is_error and name == tool)
            reason = f"Step #{step.index}: {tool or 'a tool'} returned an error ({_quote(step.text)!r})"
            reason += " and no later call to it succeeded"
            reason += f" ({unrecovered} errors from it in all)." if unrecovered > 1 else "."
            yield Suggested("unrecovered-tool-error", "incomplete_execution", reason, step.index)
            return


Rule = Callable[[TraceFacts], Iterator[Suggested]]
RULES: list[Rule] = [
    invalid_arguments,
    missing_required_arguments,
    unknown_tool,
    unknown_argument,
    unsafe_action,
    unrecovered_tool_error,
]


def suggest(facts: TraceFacts) -> list[Suggested]:
    """Every rule's findings in rule order; "needs review" alone for a failure nothing explains."""
    found = [suggested for rule in RULES for suggested in rule(facts)]
    if not found and facts.outcome == "failure":
        reason = "The trajectory failed and no rule explains why: a reviewer should bucket it."
        found.append(Suggested(NEEDS_REVIEW, None, reason))
    return found
