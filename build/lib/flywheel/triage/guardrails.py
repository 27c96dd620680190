"""An agent's guardrail settings: what the served endpoint does with a tool call that breaks each rule of its policy.

Stored beside the safety policy (`AgentPolicy.guardrails`) as `{"default": ACTION, "rules": {RULE_ID:
ACTION}}`, where an action is `block` (the client gets a refusal instead of the call), `flag` (the
call is returned, and its record carries the violation) or `off` (the endpoint does not check the
rule; triage still suggests from the whole policy). A rule without its own entry takes `default`;
an agent with no settings flags every rule (`DEFAULT`), so nothing changes for its clients until
someone chooses to block. Pure: parsing and validation only; applying them to served answers is
`flywheel.registry.guardrails`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.verifiers.safety import DENIED_TOOL_RULE, SafetyPolicy

BLOCK, FLAG, OFF = "block", "flag", "off"
ACTIONS = (BLOCK, FLAG, OFF)


class GuardrailSettingsError(ValueError):
    """The settings cannot be used; the message says why."""


def rule_ids(policy: SafetyPolicy) -> list[str]:
    """Every rule id a violation of `policy` can name, in the policy's order."""
    ids = [DENIED_TOOL_RULE] if policy.denied_tools else []
    for rules in (policy.argument_patterns, policy.filter_rules, policy.recipient_rules, policy.confirmation_rules):
        ids.extend(rule.id for rule in rules)
    return ids


@dataclass(frozen=True)
class GuardrailSettings:
    """The action per rule id, and the one for rules not named."""

    default: str = FLAG
    rules: Mapping[str, str] = field(default_factory=dict)

    def action(self, rule_id: str) -> str:
        return self.rules.get(rule_id, self.default)

    @property
    def blocks_any(self) -> bool:
        return self.default == BLOCK or BLOCK in self.rules.values()

    @property
    def off(self) -> bool:
        """Whether no rule is checked at all: the endpoint then skips the guardrails entirely."""
        return self.default == OFF and all(action == OFF for action in self.rules.values())

    def to_json(self) -> dict[str, Any]:
        return {"default": self.default, "rules": dict(self.rules)}

    @classmethod
    def from_json(cls, data: Any, *, known_rules: Collection[str] | None = None) -> GuardrailSettings:
        """Parse stored or submitted settings; `known_rules` (the policy's rule ids) refuses a misspelt rule.

        An empty object or None is the default settings. A rule the policy lacks is refused rather
        than ignored: a typo in a block entry would otherwise silently let the call through.
        """
        if data is None or data == {}:
            return DEFAULT
        if not isinstance(data, Mapping):
            raise GuardrailSettingsError('guardrails are an object: {"default": "flag", "rules": {"rule-id": "block"}}')
        unknown_keys = sorted(set(data) - {"default", "rules"})
        if unknown_keys:
            raise GuardrailSettingsError(f"unknown guardrail key {', '.join(unknown_keys)} (known: default, rules)")
        default = data.get("default", FLAG)
        rules = data.get("rules") or {}
        if default not in ACTIONS:
            raise GuardrailSettingsError(f"default action {default!r} is not one of {', '.join(ACTIONS)}")
        if not isinstance(rules, Mapping):
            raise GuardrailSettingsError("'rules' maps a rule id to an action")
        for rule_id, action in rules.items():
            if action not in ACTIONS:
                raise GuardrailSettingsError(f"rule {rule_id}: action {action!r} is not one of {', '.join(ACTIONS)}")
            if known_rules is not None and rule_id not in known_rules:
                raise GuardrailSettingsError(
                    f"rule {rule_id!r} is not in the safety policy (its rules: {', '.join(known_rules) or 'none'})"
                )
        return cls(default=default, rules=dict(rules))


DEFAULT = GuardrailSettings()
