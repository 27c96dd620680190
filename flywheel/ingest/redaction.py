"""Redact secrets and personal data from records before anything is stored.

Built-in patterns cover emails, API keys and bearer tokens, and phone numbers; custom regexes can
be added per upload or API call. Every string in the record is rewritten, values and nothing else,
and each replacement is counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

BUILT_IN: dict[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
    "api_key": (
        r"\b(?:sk|pk|rk)-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"
        r"|\bAKIA[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{30,}\b|\bxox[abpr]-[A-Za-z0-9-]{10,}"
        r"|\bBearer\s+[A-Za-z0-9._~+/=-]{16,}"
    ),
    "phone": r"(?<![\w+])\+?\d{1,3}[\s.-]?\(?\d{2,4}\)?[\s.-]?\d{3,4}[\s.-]?\d{3,4}(?!\w)",
}


@dataclass(frozen=True)
class Redactor:
    patterns: tuple[tuple[str, re.Pattern[str]], ...]

    @classmethod
    def build(cls, names: Sequence[str], custom: Sequence[str] = ()) -> Redactor:
        unknown = sorted(set(names) - set(BUILT_IN))
        if unknown:
            raise ValueError(f"unknown redaction pattern {', '.join(unknown)} (known: {', '.join(BUILT_IN)})")
        compiled = [(name, re.compile(BUILT_IN[name])) for name in names]
        for number, pattern in enumerate(custom, start=1):
            try:
                compiled.append((f"custom{number}", re.compile(pattern)))
            except re.error as exc:
                raise ValueError(f"custom redaction pattern {pattern!r} is not a valid regex: {exc}") from exc
        return cls(tuple(compiled))

    def names(self) -> list[str]:
        return [name for name, _ in self.patterns]

    def redact(self, value: Any) -> tuple[Any, int]:
        """A copy of `value` with every match replaced by [REDACTED:<pattern>], and how many there were."""
        if isinstance(value, str):
            total = 0
            for name, pattern in self.patterns:
                value, count = pattern.subn(f"[REDACTED:{name}]", value)
                total += count
            return value, total
        if isinstance(value, dict):
            pairs = [(key, self.redact(item)) for key, item in value.items()]
            return {key: item for key, (item, _) in pairs}, sum(count for _, (_, count) in pairs)
        if isinstance(value, list):
            items = [self.redact(item) for item in value]
            return [item for item, _ in items], sum(count for _, count in items)
        return value, 0
