"""Settings come from the environment and fail loudly, naming the variable at fault."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from flywheel import envparse
from tests.conftest import REPO_ROOT

PRODUCTION_ENV = {
    "DJANGO_ENV": "production",
    "SECRET_KEY": "x7!Kq2#pL9$vR4@mN8^wT1&zY6*bC3(dF5)gH0-jJ_sA+eQ=uW",
    "ALLOWED_HOSTS": "flywheel.example.com",
    "DATABASE_URL": "postgres://flywheel@db.internal:5432/flywheel",
    "CELERY_BROKER_URL": "redis://redis.internal:6379/0",
}


def run_django(env_overrides: dict[str, str | None], *args: str) -> subprocess.CompletedProcess[str]:
    inherited = set(PRODUCTION_ENV) | {"DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {key: value for key, value in os.environ.items() if key not in inherited}
    env.update({key: value for key, value in env_overrides.items() if value is not None})
    command = [sys.executable, "manage.py", *(args or ("check",))]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("missing", ["SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL"])
def test_production_refuses_to_start_without_a_required_variable(missing):
    result = run_django({**PRODUCTION_ENV, missing: None})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert missing in result.stderr


def test_production_names_every_missing_variable_at_once():
    result = run_django({"DJANGO_ENV": "production"})
    assert result.returncode != 0
    for name in ("SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL"):
        assert name in result.stderr


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DEBUG", "maybe"),
        ("DJANGO_ENV", "staging"),
        ("JOB_MAX_SECONDS", "soon"),
        ("CONN_MAX_AGE", "-1"),
        ("SUMMARY_RECOUNT_SHARE", "a tenth"),
        ("SUMMARY_RECOUNT_SHARE", "0"),
        ("SUMMARY_RECOUNT_SHARE", "nan"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(variable, value):
    result = run_django({variable: value})
    assert result.returncode != 0
    assert f"{variable}=" in result.stderr


def test_production_passes_the_deploy_check_at_warning_level():
    result = run_django(PRODUCTION_ENV, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_the_deploy_check_fails_when_production_turns_debug_on():
    result = run_django({**PRODUCTION_ENV, "DEBUG": "true"}, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert "security.W018" in result.stderr


def test_a_secret_can_come_from_a_file(tmp_path, monkeypatch):
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-a-file\n")
    monkeypatch.delenv("FLYWHEEL_TEST_SECRET", raising=False)
    monkeypatch.setenv("FLYWHEEL_TEST_SECRET_FILE", str(secret_file))
    assert envparse.env_str("FLYWHEEL_TEST_SECRET") == "from-a-file"


def test_an_unreadable_secret_file_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("FLYWHEEL_TEST_SECRET_FILE", str(tmp_path / "absent"))
    with pytest.raises(ImproperlyConfigured, match="FLYWHEEL_TEST_SECRET_FILE"):
        envparse.env_str("FLYWHEEL_TEST_SECRET")


@pytest.mark.parametrize(("raw", "expected"), [("yes", True), ("0", False), ("ON", True), ("false", False)])
def test_booleans_accept_the_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("FLYWHEEL_TEST_FLAG", raw)
    assert envparse.env_bool("FLYWHEEL_TEST_FLAG", not expected) is expected


@pytest.mark.parametrize(("raw", "expected"), [("0.25", 0.25), ("1", 1.0), ("", 0.5)])
def test_numbers_within_their_bounds_are_read(monkeypatch, raw, expected):
    monkeypatch.setenv("FLYWHEEL_TEST_SHARE", raw)
    assert envparse.env_float("FLYWHEEL_TEST_SHARE", 0.5, minimum=0.01, maximum=1.0) == expected


@pytest.mark.parametrize("raw", ["1.5", "0.001", "nan", "inf", "half"])
def test_a_number_out_of_bounds_or_unreadable_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("FLYWHEEL_TEST_SHARE", raw)
    with pytest.raises(ImproperlyConfigured, match="FLYWHEEL_TEST_SHARE="):
        envparse.env_float("FLYWHEEL_TEST_SHARE", 0.5, minimum=0.01, maximum=1.0)


def test_lists_are_comma_separated_and_trimmed(monkeypatch):
    monkeypatch.setenv("FLYWHEEL_TEST_HOSTS", " a.example, b.example ,,")
    assert envparse.env_list("FLYWHEEL_TEST_HOSTS", []) == ["a.example", "b.example"]


def test_the_embedded_defaults_need_no_server(tmp_path):
    env = {"DATABASE_URL": None, "CELERY_BROKER_URL": None, "FLYWHEEL_VAR_DIR": str(tmp_path)}
    result = run_django(
        {key: value for key, value in env.items()},
        "shell",
        "-c",
        "from django.conf import settings as s; print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL)",
    )
    assert result.returncode == 0, result.stderr
    assert "django.db.backends.sqlite3 filesystem://" in result.stdout
