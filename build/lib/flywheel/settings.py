"""Django settings, read entirely from the environment.

The defaults are the embedded demo: a SQLite file and Celery's filesystem transport under
`var/`, nothing to install. `DJANGO_ENV=production` demands the real services and secrets
and turns on every `check --deploy` protection; see README.md, "Production".
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import environ
from kombu import Queue

from flywheel.envparse import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_str,
    require_all,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("FLYWHEEL_VAR_DIR", str(BASE_DIR / "var")))

DJANGO_ENV = env_choice("DJANGO_ENV", "development", ("development", "production"))
PRODUCTION = DJANGO_ENV == "production"
if PRODUCTION:
    require_all(
        ["SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL"],
        reason="DJANGO_ENV=production",
    )

# A fixed key is acceptable only for the local demo; production refuses to start without one.
SECRET_KEY = env_str("SECRET_KEY", "django-insecure-agent-flywheel-local-demo-key-not-for-production")
DEBUG = env_bool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "axes",
    "flywheel.core",
    "flywheel.ingest",
    "flywheel.triage",
    "flywheel.datasets",
    "flywheel.training",
    "flywheel.registry",
    "flywheel.monitoring",
    "flywheel.dashboards",
    "flywheel.rewards",
    "flywheel.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "flywheel.urls"
WSGI_APPLICATION = "flywheel.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "flywheel.core.context_processors.navigation",
            ],
        },
    },
]

if not PRODUCTION:
    VAR_DIR.mkdir(parents=True, exist_ok=True)

DATABASES = {
    "default": environ.Env.db_url_config(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
    ),
}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("CONN_MAX_AGE", 60 if PRODUCTION else 0, minimum=0)
# How long a unit of work that lost its connection (the server restarting, a failover) keeps trying
# on a new one before it gives up: an ingestion batch, an upload's progress (flywheel.core.db).
DATABASE_RECONNECT_SECONDS = env_int("DATABASE_RECONNECT_SECONDS", 60, minimum=0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Writers take the lock when their transaction begins and wait for it up to 20 s, instead of
    # failing with "database is locked" when two of them meet (Django 5.1+).
    DATABASES["default"].setdefault("OPTIONS", {}).update({"transaction_mode": "IMMEDIATE", "timeout": 20})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    # Not a check: told of every new password, it revokes the user's API tokens.
    {"NAME": "flywheel.core.passwords.RevokeApiTokensOnPasswordChange"},
]
# django-axes first: a locked-out account or address is refused before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboards:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        ),
    },
}
# Outside production WhiteNoise serves straight from the source folders: no collectstatic needed.
WHITENOISE_USE_FINDERS = not PRODUCTION
if not PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(VAR_DIR / "media")))

# --- Celery -----------------------------------------------------------------------------
# The longest job the gpu queue runs; the broker must not redeliver a job still running.
JOB_MAX_SECONDS = env_int("JOB_MAX_SECONDS", int(timedelta(hours=12).total_seconds()), minimum=60)

_EMBEDDED_BROKER_DIR = VAR_DIR / "celery" / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://localhost/")  # the transport ignores the host
if CELERY_BROKER_URL.startswith("filesystem://"):
    for _folder in ("queue", "processed", "control"):
        (_EMBEDDED_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "data_folder_in": str(_EMBEDDED_BROKER_DIR / "queue"),
        "data_folder_out": str(_EMBEDDED_BROKER_DIR / "queue"),
        "processed_folder": str(_EMBEDDED_BROKER_DIR / "processed"),
        "control_folder": str(_EMBEDDED_BROKER_DIR / "control"),
        "store_processed": False,
    }
    (VAR_DIR / "celery" / "results").mkdir(parents=True, exist_ok=True)
    _default_result_backend = f"file://{VAR_DIR / 'celery' / 'results'}"
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": JOB_MAX_SECONDS + 3600}
    _default_result_backend = CELERY_BROKER_URL
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", _default_result_backend)
CELERY_RESULT_EXPIRES = timedelta(days=1)
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = (Queue("default"), Queue("gpu"))
CELERY_TASK_ROUTES = {
    "flywheel.training.tasks.*": {"queue": "gpu"},
    "flywheel.core.tasks.gpu_ping": {"queue": "gpu"},  # check_workers' ping of the gpu workers
}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker restart while a job or an upload runs must not stop it: the work is claimed in the
# database, beats its own heartbeat there and finishes once; the message it came in is lost with the
# connection either way, and a redelivery of it finds the work claimed and does nothing. (Celery 6
# will cancel such tasks by default: this keeps them running.)
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

# --- Security ---------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    if env_bool("BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Login lockout (django-axes) --------------------------------------------------------------
# Wrong passwords in a row lock the account (from any address) and the address (for any account),
# on the app's login and the admin's, until the cool-off ends or an admin resets it
# (`manage.py axes_reset_username NAME`, or delete the attempt on the admin's "Access attempts").
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1))
# "username", "ip_address", or a combination joined with "+" (e.g. "username+ip_address": only the pair).
AXES_LOCKOUT_PARAMETERS = [
    item.split("+") if "+" in item else item for item in env_list("AXES_LOCKOUT_PARAMETERS", ["username", "ip_address"])
]
AXES_RESET_ON_SUCCESS = True  # "in a row": a right password clears the count
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Behind reverse proxies every request comes from a proxy's address: the lockout counts the
# client's, from X-Forwarded-For (flywheel.core.access.client_address).
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 1 if env_bool("BEHIND_TLS_PROXY", False) else 0, minimum=0)
AXES_CLIENT_IP_CALLABLE = "flywheel.core.access.client_address"

# --- API rate limits (django-ratelimit) -------------------------------------------------------
# Requests per window for each API token (a browser session: each user) on the ingest API and
# OTLP receiver together, and on chat completions; past it, 429 with Retry-After.
API_RATE_WINDOW_SECONDS = env_int("API_RATE_WINDOW_SECONDS", 60, minimum=1)
API_RATE_LIMITS = {
    "ingest": env_int("API_RATE_LIMIT_INGEST", 600, minimum=1),
    "chat": env_int("API_RATE_LIMIT_CHAT", 60, minimum=1),
}
RATELIMIT_FAIL_OPEN = True  # a cache that cannot count lets calls through rather than refusing all
# The counts must be shared by every web process: Redis in production (CACHE_URL, else the Redis
# broker), the process's own memory for the one-process demo.
_redis_broker = CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
if PRODUCTION and not _redis_broker:
    require_all(["CACHE_URL"], reason="DJANGO_ENV=production with a broker that is not Redis")
CACHES = {
    "default": environ.Env.cache_url_config(
        env_str("CACHE_URL", _redis_broker if PRODUCTION and _redis_broker else "locmemcache://")
    )
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# The third-party data (BFCL, WorkBench, NeMo Gym, tau-bench) the importers and the demo read.
SHARED_EXTERNAL_DIR = Path(env_str("SHARED_EXTERNAL_DIR", str(BASE_DIR.parent / "shared" / "external")))

# The demo logins file; read by `make demo` and never used in production.
DEMO_LOGINS_FILE = VAR_DIR / "demo-logins.json"
HEALTHZ_TIMEOUT_SECONDS = env_int("HEALTHZ_TIMEOUT_SECONDS", 3, minimum=1)
API_TOKEN_LAST_USE_RESOLUTION = timedelta(minutes=1)

# --- Ingestion --------------------------------------------------------------------------
INGEST_MAX_UPLOAD_BYTES = env_int("INGEST_MAX_UPLOAD_BYTES", 1 << 30, minimum=1)
INGEST_MAX_DECOMPRESSED_BYTES = env_int("INGEST_MAX_DECOMPRESSED_BYTES", 4 << 30, minimum=1)
INGEST_MAX_RECORD_BYTES = env_int("INGEST_MAX_RECORD_BYTES", 16 << 20, minimum=1024)
INGEST_MAX_DEPTH = env_int("INGEST_MAX_DEPTH", 64, minimum=4)
INGEST_BATCH_SIZE = env_int("INGEST_BATCH_SIZE", 500, minimum=1)
# Batches and the read-ahead are bounded by bytes (the records' JSON) as well as by count.
INGEST_BATCH_BYTES = env_int("INGEST_BATCH_BYTES", 8 << 20, minimum=1024)
INGEST_READ_AHEAD_BYTES = env_int("INGEST_READ_AHEAD_BYTES", 8 << 20, minimum=1024)
INGEST_PROGRESS_SECONDS = 5  # progress (the upload's heartbeat) is committed at least this often
# A running upload whose progress is older than this lost its worker: the next claim takes it over.
INGEST_STALE_SECONDS = env_int("INGEST_STALE_SECONDS", 300, minimum=10)
INGEST_MAX_ATTEMPTS = env_int("INGEST_MAX_ATTEMPTS", 3, minimum=1)
# Keep the raw file of a processed upload (never kept when redaction was asked for).
INGEST_KEEP_RAW_UPLOADS = env_bool("INGEST_KEEP_RAW_UPLOADS", False)
INGEST_ERRORS_KEPT = 100
# Redaction patterns ticked by default on the upload form and applied by default to API calls.
INGEST_REDACT_DEFAULT = env_list("INGEST_REDACT_DEFAULT", [])
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 << 20
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 10 << 20, minimum=1024)
# A gzipped API body is decompressed up to this many bytes (413 past it): a small bomb stops here.
API_MAX_DECOMPRESSED_BYTES = env_int("API_MAX_DECOMPRESSED_BYTES", 32 << 20, minimum=1024)
API_MAX_BATCH_ITEMS = env_int("API_MAX_BATCH_ITEMS", 1000, minimum=1)

# --- Jobs -------------------------------------------------------------------------------
JOB_RUNS_DIR = Path(env_str("JOB_RUNS_DIR", str(VAR_DIR / "runs")))
JOB_MAX_ATTEMPTS = env_int("JOB_MAX_ATTEMPTS", 3, minimum=1)
JOB_HEARTBEAT_SECONDS = env_int("JOB_HEARTBEAT_SECONDS", 5, minimum=1)
# A running job whose heartbeat is older than this has lost its worker; the reaper requeues it.
JOB_HEARTBEAT_STALE_SECONDS = env_int("JOB_HEARTBEAT_STALE_SECONDS", 60, minimum=2)
JOB_CANCEL_GRACE_SECONDS = env_int("JOB_CANCEL_GRACE_SECONDS", 10, minimum=1)
JOB_REAP_EVERY_SECONDS = env_int("JOB_REAP_EVERY_SECONDS", 30, minimum=1)
# How a job attempt starts trainer; tests put a scripted stand-in here to exercise crashes and cancels.
TRAINER_COMMAND = env_list("TRAINER_COMMAND", [sys.executable, "-m", "trainer"])
# How a job whose hyperparameters choose the vllm backend starts trainer: vLLM lives in a virtualenv
# of its own (`make vllm` builds .venv-vllm with its CPU build). Empty: TRAINER_COMMAND, for an
# installation whose own Python has vLLM (`pip install '.[gpu]'` on a CUDA machine).
_VLLM_PYTHON = BASE_DIR / ".venv-vllm" / "bin" / "python"
TRAINER_VLLM_COMMAND = env_list(
    "TRAINER_VLLM_COMMAND", [str(_VLLM_PYTHON), "-m", "trainer"] if _VLLM_PYTHON.exists() else []
)
# A team's own environments a job launched from the app may name, beside the built-in ones: entry
# points (`package.module:factory`) and MCP servers (`mcp:<command>`). An operator's list: naming
# one runs its code on the workers, so a launch form must never accept an arbitrary one.
TRAINER_ENVIRONMENTS = env_list("TRAINER_ENVIRONMENTS", [])
# The outbox sweepers (uploads, served answers, synthetic batches; jobs ride on the reaper): re-send a
# queued row never sent after DISPATCH_GRACE_SECONDS, or sent DISPATCH_RESEND_SECONDS ago and never claimed.
DISPATCH_SWEEP_EVERY_SECONDS = env_int("DISPATCH_SWEEP_EVERY_SECONDS", 30, minimum=1)
DISPATCH_GRACE_SECONDS = 10
DISPATCH_RESEND_SECONDS = env_int("DISPATCH_RESEND_SECONDS", 600, minimum=10)
DISPATCH_SWEEP_LIMIT = 500  # rows re-sent per sweep at most
# --- Monitoring (online scoring and regression alerts) ---------------------------------------
# Beat scores what ingest's message missed (trajectories of the last MONITOR_SCORE_SWEEP_HOURS with
# no score for an enabled rule that samples them) and compares each live version with its predecessor.
MONITOR_EVERY_SECONDS = env_int("MONITOR_EVERY_SECONDS", 300, minimum=1)
MONITOR_SCORE_SWEEP_HOURS = env_int("MONITOR_SCORE_SWEEP_HOURS", 24, minimum=1)
# The trajectories of the last MONITOR_WINDOW_DAYS make the monitor page and the versions' windows.
MONITOR_WINDOW_DAYS = env_int("MONITOR_WINDOW_DAYS", 30, minimum=1)
# A rate is compared only when both versions have at least this many trajectories that count for it.
MONITOR_MIN_SAMPLES = env_int("MONITOR_MIN_SAMPLES", 30, minimum=2)
# After scoring, an agent's regression check runs this long after the first batch asks, once for all
# the batches meanwhile (a check aggregates the window: per batch it would cost a busy agent dearly).
MONITOR_CHECK_DELAY_SECONDS = env_int("MONITOR_CHECK_DELAY_SECONDS", 30, minimum=0)
# One-sided significance level of the two-proportion test that opens a regression alert.
MONITOR_ALPHA = 0.05
# The `judge` online scorer: at most this many trajectories per judge job, and judge jobs per trajectory.
MONITOR_JUDGE_BATCH = env_int("MONITOR_JUDGE_BATCH", 200, minimum=1)
MONITOR_JUDGE_ATTEMPTS = env_int("MONITOR_JUDGE_ATTEMPTS", 3, minimum=1)

# --- Count summaries ------------------------------------------------------------------------
# Counts over every trajectory (queue progress, the home page and dashboards) cost seconds at a
# million trajectories: beat recounts them this often, per agent, and pages add those up and say when.
SUMMARY_REFRESH_SECONDS = env_int("SUMMARY_REFRESH_SECONDS", 60, minimum=1)
# A summary older than this (beat not running) or missing is recounted by the page that needs it.
SUMMARY_STALE_SECONDS = env_int("SUMMARY_STALE_SECONDS", 300, minimum=1)

CELERY_BEAT_SCHEDULE = {
    "reap-jobs": {"task": "flywheel.training.reaper.reap_jobs", "schedule": float(JOB_REAP_EVERY_SECONDS)},
    "sweep-uploads": {
        "task": "flywheel.ingest.tasks.sweep_uploads",
        "schedule": float(DISPATCH_SWEEP_EVERY_SECONDS),
    },
    "sweep-synthetic": {
        "task": "flywheel.datasets.tasks.sweep_synthetic_batches",
        "schedule": float(DISPATCH_SWEEP_EVERY_SECONDS),
    },
    "sweep-served": {
        "task": "flywheel.registry.tasks.sweep_served",
        "schedule": float(DISPATCH_SWEEP_EVERY_SECONDS),
    },
    "monitor-agents": {
        "task": "flywheel.monitoring.tasks.monitor_sweep",
        "schedule": float(MONITOR_EVERY_SECONDS),
    },
    "recount-summaries": {
        "task": "flywheel.dashboards.tasks.summaries_recount",
        "schedule": float(SUMMARY_REFRESH_SECONDS),
    },
}

# --- Registry and serving -----------------------------------------------------------------
# Registered adapters are copied here, read-only, and verified by hash on every load.
# Empty: MEDIA_ROOT/registry (read when used, so test overrides of MEDIA_ROOT apply).
REGISTRY_DIR = env_str("REGISTRY_DIR", "")
# An OpenAI-compatible server for the live versions (vLLM started with --enable-lora --lora-modules,
# or a `python -m trainer serve`); empty: the app starts and switches its own `python -m trainer serve`.
SERVE_URL = env_str("SERVE_URL", "").rstrip("/")
# The admin token of a `python -m trainer serve` at SERVE_URL, so the app can switch its adapter;
# empty for vLLM, which is asked for the live version by its LoRA module name instead.
SERVE_ADMIN_TOKEN = env_str("SERVE_ADMIN_TOKEN", "")
SERVE_DEVICE = env_str("SERVE_DEVICE", "cpu")
SERVE_MAX_NEW_TOKENS = env_int("SERVE_MAX_NEW_TOKENS", 256, minimum=1)
SERVE_STARTUP_SECONDS = env_int("SERVE_STARTUP_SECONDS", 300, minimum=5)
SERVE_REQUEST_SECONDS = env_int("SERVE_REQUEST_SECONDS", 300, minimum=5)
# The app's own serving process is (re)started at most once per this many seconds.
SERVE_RESTART_MIN_SECONDS = env_int("SERVE_RESTART_MIN_SECONDS", 30, minimum=0)
# How `python -m trainer serve` starts; the same override as TRAINER_COMMAND.
SERVE_COMMAND = env_list("SERVE_COMMAND", [sys.executable, "-m", "trainer", "serve"])
# What the app's own serving process is when SERVE_URL is empty: `trainer` (`python -m trainer serve`,
# one request at a time, no vLLM needed) or `vllm` (vLLM's OpenAI server from VLLM_SERVE_COMMAND, every
# version's adapter loaded at runtime by name, the trainer's chat template and the hermes tool parser).
SERVE_ENGINE = env_choice("SERVE_ENGINE", "trainer", ("trainer", "vllm"))
VLLM_SERVE_COMMAND = env_list("VLLM_SERVE_COMMAND", [str(_VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server"])
