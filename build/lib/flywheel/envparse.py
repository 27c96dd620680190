"""Small typed readers for environment variables that fail loudly on bad values.

Every reader also accepts `<NAME>_FILE`, the path of a file holding the value, so that
secrets can come from mounted files (Docker and Kubernetes secrets) instead of the
environment itself. Parsing of URLs (databases, brokers) is left to django-environ.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_raw(name: str) -> str | None:
    """The variable's value, from NAME or the file NAME_FILE names; None when unset."""
    if name in os.environ:
        return os.environ[name]
    file_path = os.environ.get(f"{name}_FILE")
    if file_path is None:
        return None
    try:
        return Path(file_path).read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc.strerror}") from exc


def env_str(name: str, default: str | None = None) -> str:
    value = env_raw(name)
    if value is None or value == "":
        if default is None:
            raise ImproperlyConfigured(f"{name} is required")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = env_raw(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_raw(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_raw(name)
    if value is None or value.strip() == "":
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value


def require_all(names: list[str], *, reason: str) -> None:
    """Fail naming every variable of `names` that is unset, not only the first."""
    missing = [name for name in names if not env_raw(name)]
    if missing:
        raise ImproperlyConfigured(f"{reason} requires {', '.join(missing)} (missing from the environment)")
