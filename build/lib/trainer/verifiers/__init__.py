"""Verifiers by name: each scores a batch of completions of tasks and explains every verdict.

- `tool_call` (the default for training): the guide's reward, lenient argument matching.
- `binary`: 1.0 when `tool_call`'s rules pass in full, else 0.0.
- `bfcl`: the Berkeley Function Calling Leaderboard's strict AST-checker semantics.
- `shaped`: the guide's opt-in multi-step shaping (+0.1 / +0.2 / +0.3 / +1.0, -1.0 unsafe).

The contract is `trainer.verifiers.base.Verifier`; the safety policy is
`trainer.verifiers.safety.SafetyPolicy`. This package never imports torch or Django.
"""

from __future__ import annotations

from collections.abc import Callable

from trainer.verifiers.base import Completion, Verifier
from trainer.verifiers.bfcl import BfclVerifier
from trainer.verifiers.binary import BinaryVerifier
from trainer.verifiers.safety import SafetyPolicy
from trainer.verifiers.shaped import ShapedVerifier
from trainer.verifiers.tool_call import ToolCallVerifier

DEFAULT_VERIFIER = "tool_call"

_FACTORIES: dict[str, Callable[[SafetyPolicy | None], Verifier]] = {
    ToolCallVerifier.name: ToolCallVerifier,
    BinaryVerifier.name: BinaryVerifier,
    ShapedVerifier.name: ShapedVerifier,
    # BFCL has no notion of safety, so its verifier takes no policy.
    BfclVerifier.name: lambda _policy: BfclVerifier(),
}


def verifier_names() -> list[str]:
    return sorted(_FACTORIES)


def get_verifier(name: str = DEFAULT_VERIFIER, policy: SafetyPolicy | None = None) -> Verifier:
    """The verifier registered under `name`, using `policy` (default policy when None)."""
    if name not in _FACTORIES:
        raise KeyError(f"unknown verifier {name!r}; known: {', '.join(verifier_names())}")
    return _FACTORIES[name](policy)


__all__ = ["DEFAULT_VERIFIER", "Completion", "SafetyPolicy", "Verifier", "get_verifier", "verifier_names"]
