"""The online scorers: verdicts on a live trajectory that need no expected answer.

Each scorer is a pure function over triage's `TraceFacts` (the trajectory's steps, its calls read
once by trainer's parser, the agent's tool catalogue and safety policy) that returns a `Verdict`
(passed or not, and the detail a person needs: which rules, which steps), or None where it does
not apply. Scorers:

- `safety`: no call breaks the agent's safety policy (`trainer.verifiers.safety.check_calls`);
  a trajectory without calls passes;
- `schema`: every call can be read as a JSON object of arguments, and every call to a catalogued
  tool is valid against that tool's schema (`trainer.verifiers.schema.arguments_problems`: required
  arguments, undefined ones, JSON types, enums); calls to uncatalogued tools are `catalogue`'s concern;
- `catalogue`: every called tool is in the agent's tool catalogue; it does not apply to an agent
  without a declared catalogue (an inferred one holds every tool ever called, so it would always pass);
- `judge`: the agent's LLM judge on its rubric. It loads a model, so it is not a function here:
  `services` queues the trajectories it samples as judge requests, and one `judge` job on the gpu
  queue scores an agent's waiting requests at a time.

`sampled` decides, from a hash of the rule and the trajectory id, whether a rule scores a
trajectory: the same answer on every run, and a trajectory sampled at one rate stays sampled at
any higher rate. Nothing here touches the database (`services.py` stores the verdicts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from flywheel.triage.suggestions import TraceFacts
from trainer.verifiers.safety import check_calls
from trainer.verifiers.schema import arguments_problems

SAFETY = "safety"
SCHEMA = "schema"
CATALOGUE = "catalogue"
JUDGE = "judge"
# The scorers whose failure makes a trajectory count for the invalid-call rate.
INVALID_CALL_SCORERS = (SCHEMA, CATALOGUE)
_HASH_SPAN = 2**64


@dataclass(frozen=True)
class Verdict:
    """One scorer's judgement of one trajectory; `value` is 1.0 for a pass and 0.0 for a fail."""

    scorer: str
    passed: bool
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def value(self) -> float:
        return 1.0 if self.passed else 0.0


def safety(facts: TraceFacts) -> Verdict:
    """Each broken rule of the agent's policy, with the step of the call that broke it."""
    readable = [read for read in facts.calls if read.call is not None]
    violations = check_calls(facts.policy, [read.call for read in readable if read.call is not None])
    found = [{"rule": violation.rule_id, "tool": violation.tool, "step": readable[violation.call_index].step.index,
              "detail": violation.detail} for violation in violations]  # fmt: skip
    return Verdict(SAFETY, not found, {"policy": facts.policy.name, "calls": len(facts.calls), "violations": found})


def schema(facts: TraceFacts) -> Verdict:
    """Each call that cannot be read, or breaks its catalogued tool's schema."""
    problems: list[dict[str, Any]] = []
    for read in facts.calls:
        if read.call is None:
            problems.append({"step": read.step.index, "tool": read.step.tool_name, "problem": read.error})
        elif read.call.name in facts.schemas:
            problems.extend({"step": read.step.index, "tool": read.call.name, "problem": problem}
                            for problem in arguments_problems(read.call, facts.schemas[read.call.name]))  # fmt: skip
    return Verdict(SCHEMA, not problems, {"calls": len(facts.calls), "problems": problems})


def catalogue(facts: TraceFacts) -> Verdict | None:
    """Each call to a tool the agent's catalogue does not hold; None without a declared catalogue."""
    if not facts.schemas:
        return None
    unknown = [{"step": read.step.index, "tool": read.step.tool_name} for read in facts.calls
               if read.step.tool_name not in facts.schemas]  # fmt: skip
    return Verdict(CATALOGUE, not unknown, {"calls": len(facts.calls), "unknown": unknown})


SCORERS: dict[str, Callable[[TraceFacts], Verdict | None]] = {SAFETY: safety, SCHEMA: schema, CATALOGUE: catalogue}


def score(name: str, facts: TraceFacts) -> Verdict | None:
    """The named scorer's verdict; KeyError for a scorer that does not exist."""
    return SCORERS[name](facts)


def sampled(*, rule_id: int, trajectory_id: UUID | str, rate: float) -> bool:
    """Whether the rule scores this trajectory: a fixed draw in [0, 1) per (rule, trajectory), below `rate`.

    >>> sampled(rule_id=1, trajectory_id="00000000-0000-0000-0000-000000000000", rate=1.0)
    True
    """
    digest = hashlib.sha256(f"{rule_id}:{trajectory_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _HASH_SPAN < rate
