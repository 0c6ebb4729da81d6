"""Yasugoro settings: everything comes from the environment, with safe local defaults.

Local state that must not be in git (the SQLite database, the generated secret key, the VAPID
key pair) lives in `var/`, which is git-ignored.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from yasugoro.env import env_bool, env_float, env_int, env_list, env_str, secret_from_file

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("YASUGORO_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY") or secret_from_file(VAR_DIR / "secret_key")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_q",
    "watches",
    "outbox",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "yasugoro.urls"
WSGI_APPLICATION = "yasugoro.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
# SQLite by default: WAL so readers never block the dispatcher, a busy timeout so a second
# writer waits instead of failing, and BEGIN IMMEDIATE so a transaction takes the write lock
# up front (select-then-update inside one transaction is then atomic; FINDINGS.md).
_SQLITE_DEFAULT = f"sqlite:///{VAR_DIR / 'yasugoro.sqlite3'}"
DATABASE_URL = env_str("DATABASE_URL") or _SQLITE_DEFAULT
_db = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0))
if _db["ENGINE"] == "django.db.backends.sqlite3":
    if _db["NAME"] not in ("", ":memory:"):
        Path(_db["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    _db["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests on SQLite use a file, not :memory:, so concurrent dispatchers (threads) really
    # share one database the way separate processes would.
    _db["TEST"] = {"NAME": str(VAR_DIR / "test-yasugoro.sqlite3")}
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # Separate checkouts on one server can each have their own test database.
    _db["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME") or f"test_{_db['NAME']}"}
else:
    raise ImproperlyConfigured("DATABASE_URL must point at SQLite or PostgreSQL")
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Time and language --------------------------------------------------------------------
LANGUAGE_CODE = "ja"
LANGUAGES = [("ja", "日本語"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "Asia/Tokyo")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

# --- Security (production values unless DEBUG) ---------------------------------------------
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_PROXY", False) else None
)
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# --- Outbox -------------------------------------------------------------------------------
OUTBOX_MAX_RETRY = env_int("OUTBOX_MAX_RETRY", 8, minimum=0)
OUTBOX_LEASE_SECONDS = env_int("OUTBOX_LEASE_SECONDS", 300, minimum=10)
OUTBOX_BATCH_SIZE = env_int("OUTBOX_BATCH_SIZE", 500, minimum=1)
# A cycle stops claiming new batches after this long, so cycles never pile up on each other.
OUTBOX_CYCLE_SECONDS = env_int("OUTBOX_CYCLE_SECONDS", 50, minimum=1)
# Delivery waits on the network: a bounded pool of threads per dispatcher.
OUTBOX_DELIVERY_WORKERS = env_int("OUTBOX_DELIVERY_WORKERS", 8, minimum=1)
OUTBOX_BACKOFF_BASE_SECONDS = 30
OUTBOX_BACKOFF_CAP_SECONDS = 30 * 60
# The service's day for the one-notification-per-day rule; pinned in the migration too.
OUTBOX_DEDUP_ZONE = "Asia/Tokyo"
# Retention (schedule `outbox-retention`, daily): finished rows and their events are deleted
# this long after their last move; dispatch cycle records sooner, they only matter recently.
OUTBOX_RETENTION_DAYS = env_int("OUTBOX_RETENTION_DAYS", 90, minimum=1)
OUTBOX_DISPATCH_RUN_RETENTION_DAYS = env_int("OUTBOX_DISPATCH_RUN_RETENTION_DAYS", 14, minimum=1)
# Channel name -> class implementing outbox.channels.base.Channel.
OUTBOX_CHANNEL_CLASSES = {
    "console": "outbox.channels.console.ConsoleChannel",
}

# --- Marketplaces -------------------------------------------------------------------------
# Source name -> class implementing watches.marketplaces.base.Marketplace.
MARKETPLACE_ADAPTERS = {
    "demo": "watches.marketplaces.demo.DemoMarketplace",
}
RAKUTEN_APP_ID = env_str("RAKUTEN_APP_ID")
RAKUTEN_API_URL = env_str(
    "RAKUTEN_API_URL", "https://app.rakuten.co.jp/services/api/IchibaItem/Search/20220601"
)
RAKUTEN_RATE_PER_SECOND = env_float("RAKUTEN_RATE_PER_SECOND", 1.0, minimum=0.01)
POLL_MINUTES = env_int("POLL_MINUTES", 15, minimum=1)

# --- django-q2 ----------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
Q_CLUSTER = {
    "name": "yasugoro",
    "workers": env_int("Q_WORKERS", 2, minimum=1),
    "timeout": env_int("Q_TIMEOUT", 240, minimum=10),
    # retry must exceed timeout, or django-q2 re-queues a task that is still running.
    "retry": env_int("Q_TIMEOUT", 240, minimum=10) + 60,
    "max_attempts": 1,
    "catch_up": False,
    "ack_failures": True,
    "save_limit": 500,
    "label": "Tasks",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "yasugoro": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "outbox": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "watches": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    },
}
