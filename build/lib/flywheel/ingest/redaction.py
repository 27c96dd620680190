"""Redact secrets and personal data from records before anything is stored.

Built-in patterns cover emails, API keys and bearer tokens, and phone numbers; custom regexes can
be added per upload or API call. Every string in the record is rewritten, values and nothing else,
and each replacement is counted.

Patterns run on Google's RE2 (the `google-re2` binding), whose matching time is linear in the
text: any ingest user may send a pattern, and one such as `(a+)+$` would backtrack for hours on
Python's `re`. RE2 has no backreferences or lookaround; a pattern that uses them is refused with
the reason when the upload or API call is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import re2

BUILT_IN: dict[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
    "api_key": (
        r"\b(?:sk|pk|rk)-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"
        r"|\bAKIA[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{30,}\b|\bxox[abpr]-[A-Za-z0-9-]{10,}"
        r"|\bBearer\s+[A-Za-z0-9._~+/=-]{16,}"
    ),
    # RE2 has no lookbehind: the character before the number is matched in group 1 and put back.
    "phone": r"(^|[^\w+])\+?\d{1,3}[\s.-]?\(?\d{2,4}\)?[\s.-]?\d{3,4}[\s.-]?\d{3,4}\b",
}
# What a match of each built-in pattern becomes; custom patterns are replaced whole.
KEEPS_PREFIX = {"phone"}
MAX_PATTERN_MEMORY = 8 << 20


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported to its sender, not logged by RE2
    options.max_mem = MAX_PATTERN_MEMORY
    return options


def compile_pattern(pattern: str) -> Any:
    """The RE2 program for `pattern`; ValueError with RE2's reason when it cannot run in linear time."""
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"custom redaction pattern {pattern!r} cannot run on RE2 ({reason}); "
            "RE2 matches in linear time, without backreferences or lookaround"
        ) from None


@dataclass(frozen=True)
class Redactor:
    patterns: tuple[tuple[str, Any], ...]  # (name, RE2 program)

    @classmethod
    def build(cls, names: Sequence[str], custom: Sequence[str] = ()) -> Redactor:
        unknown = sorted(set(names) - set(BUILT_IN))
        if unknown:
            raise ValueError(f"unknown redaction pattern {', '.join(unknown)} (known: {', '.join(BUILT_IN)})")
        compiled = [(name, re2.compile(BUILT_IN[name], _options())) for name in names]
        compiled += [(f"custom{number}", compile_pattern(pattern)) for number, pattern in enumerate(custom, start=1)]
        return cls(tuple(compiled))

    def names(self) -> list[str]:
        return [name for name, _ in self.patterns]

    def redact(self, value: Any) -> tuple[Any, int]:
        """A copy of `value` with every match replaced by [REDACTED:<pattern>], and how many there were."""
        if isinstance(value, str):
            total = 0
            for name, pattern in self.patterns:
                replacement = f"\\1[REDACTED:{name}]" if name in KEEPS_PREFIX else f"[REDACTED:{name}]"
                value, count = pattern.subn(replacement, value)
                total += count
            return value, total
        if isinstance(value, dict):
            pairs = [(key, self.redact(item)) for key, item in value.items()]
            return {key: item for key, (item, _) in pairs}, sum(count for _, (_, count) in pairs)
        if isinstance(value, list):
            items = [self.redact(item) for item in value]
            return [item for item, _ in items], sum(count for _, count in items)
        return value, 0
