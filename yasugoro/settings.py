"""Yasugoro settings: everything comes from the environment, with safe local defaults.

Local state that must not be in git (the SQLite database, the generated secret key, the VAPID
key pair) lives in `var/`, which is git-ignored.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy

from yasugoro.env import (
    check_rakuten_api_url,
    email_settings_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    rakuten_applications,
    secret_from_file,
    site_origin,
)
from yasugoro.site_url import read_recorded, site_url

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
    # The Content-Security-Policy header (below); its system checks catch an outdated setting.
    "csp",
    "watches",
    "outbox",
    "monitoring",
]

MIDDLEWARE = [
    # /healthz, /readyz, /metrics: answered before the host check and the HTTPS redirect.
    "monitoring.middleware.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Before every middleware that may answer on its own, so each answer carries the policy.
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    # A query string no view may see (a NUL, bytes that are not UTF-8, too long) is answered
    # here, in the request's language, before any view reads it.
    "yasugoro.query_string.QueryStringMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Warns once when a request's address is not SITE_URL's (the links in every mail).
    "yasugoro.site_url.SiteUrlMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Sets or clears the anonymous device cookie when a view created, moved or deleted one.
    "watches.devices.DeviceCookieMiddleware",
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
# up front (select-then-update inside one transaction is then atomic; decision 0004).
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
# The footer's language switch sets it: like every other cookie of the site, over HTTPS only.
LANGUAGE_COOKIE_SECURE = not DEBUG
LANGUAGE_COOKIE_SAMESITE = "Lax"
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_PROXY", False) else None
)
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Every response, pages and admin alike: scripts, styles and fonts from this site only (no
# inline script or style attribute: templates use files and classes, and nonces would not
# survive the page cache), no plugin, no framing, forms post here only. Images may also come
# from the marketplaces' https image hosts (a listing's picture) and data: URLs (the admin's
# icons). docs/decisions/0056-content-security-policy.md.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:", "https:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "worker-src": [SELF],
        "manifest-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}

# --- Outbox -------------------------------------------------------------------------------
OUTBOX_MAX_RETRY = env_int("OUTBOX_MAX_RETRY", 8, minimum=0)
# At least 2 × the longest delivery (Web Push connect + read, or EMAIL_TIMEOUT) + 5 s
# (checked at start-up, outbox.lease.check_settings); the dispatcher renews it while it works.
OUTBOX_LEASE_SECONDS = env_int("OUTBOX_LEASE_SECONDS", 300, minimum=10)
# A re-fetched value older than this is fetched again before a send.
OUTBOX_REFETCH_MAX_AGE = env_int("OUTBOX_REFETCH_MAX_AGE", 30, minimum=1)
OUTBOX_BATCH_SIZE = env_int("OUTBOX_BATCH_SIZE", 500, minimum=1)
# A cycle stops claiming new batches after this long, so cycles never pile up on each other.
OUTBOX_CYCLE_SECONDS = env_int("OUTBOX_CYCLE_SECONDS", 50, minimum=1)
# Dispatch cycles the `outbox-dispatch` schedule starts each minute on PostgreSQL (the fleet's
# qcluster workers run them side by side; set it to the dispatch workers of all hosts).
# SQLite keeps one: it has one writer.
OUTBOX_DISPATCHERS = env_int("OUTBOX_DISPATCHERS", 1, minimum=1)
# Delivery waits on the network: a bounded pool of threads per dispatcher.
OUTBOX_DELIVERY_WORKERS = env_int("OUTBOX_DELIVERY_WORKERS", 8, minimum=1)
OUTBOX_BACKOFF_BASE_SECONDS = 30
OUTBOX_BACKOFF_CAP_SECONDS = 30 * 60
# Retention (schedule `outbox-retention`, daily): finished rows and their events are deleted
# this long after their last move; dispatch cycle records sooner, they only matter recently.
OUTBOX_RETENTION_DAYS = env_int("OUTBOX_RETENTION_DAYS", 90, minimum=1)
OUTBOX_DISPATCH_RUN_RETENTION_DAYS = env_int("OUTBOX_DISPATCH_RUN_RETENTION_DAYS", 14, minimum=1)
# Channel name -> class implementing outbox.channels.base.Channel.
OUTBOX_CHANNEL_CLASSES = {
    "console": "outbox.channels.console.ConsoleChannel",
    "webpush": "outbox.channels.webpush.WebPushChannel",
    "email": "outbox.channels.email.EmailChannel",
}

# --- E-mail -------------------------------------------------------------------------------
# Django's mail framework: EMAIL_URL (smtp://, smtp+tls://, smtps://, console:) or the
# EMAIL_* settings one by one. Under DEBUG without either, mails are printed (console).
EMAIL_URL = env_str("EMAIL_URL")
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
# Without a timeout a stalled SMTP server would hold a delivery thread for ever.
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0, minimum=0.1)
if EMAIL_URL:
    globals().update(email_settings_from_url(EMAIL_URL))
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL exclude each other")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Yasugoro <noreply@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
# Where links in a mail point (no trailing slash): the site as people reach it, the same in
# every process that sends mail (web, cluster, `dispatch_outbox` by hand). `make run` passes
# the address it serves at and records it in var/site_url, which a command run by hand under
# DEBUG reads; the site warns once when a request comes in elsewhere (yasugoro.site_url).
SITE_URL = site_url(
    env_str("SITE_URL"),
    recorded=read_recorded(VAR_DIR / "site_url") if DEBUG else "",
    debug=DEBUG,
    allowed_hosts=ALLOWED_HOSTS,
)
# A confirmation link works this long; unsubscribe links in a mail for EMAIL_UNSUBSCRIBE_DAYS.
EMAIL_CONFIRM_HOURS = env_int("EMAIL_CONFIRM_HOURS", 48, minimum=1)
EMAIL_UNSUBSCRIBE_DAYS = env_int("EMAIL_UNSUBSCRIBE_DAYS", 365, minimum=1)
# Confirmation mails per device and per address in an hour (nobody can make us mail-bomb).
EMAIL_CONFIRM_PER_HOUR = env_int("EMAIL_CONFIRM_PER_HOUR", 3, minimum=1)
# Hard bounces (5xx on the recipient) after which the address is disabled.
EMAIL_BOUNCE_LIMIT = env_int("EMAIL_BOUNCE_LIMIT", 3, minimum=1)

# --- Anonymous devices --------------------------------------------------------------------
# The device cookie carries the only copy of the device's token; the database keeps its hash.
DEVICE_COOKIE_SECURE = not DEBUG
DEVICE_COOKIE_MAX_AGE = 365 * 24 * 3600
# How long a "move to another browser" link stays usable (it also works only once).
DEVICE_TRANSFER_MINUTES = env_int("DEVICE_TRANSFER_MINUTES", 15, minimum=1)

# --- Web Push -----------------------------------------------------------------------------
# The VAPID private key: VAPID_PRIVATE_KEY (base64url raw, from `manage.py vapid_keys --print`)
# or else the PEM file (created by `manage.py vapid_keys --ensure`, git-ignored under var/).
VAPID_PRIVATE_KEY = env_str("VAPID_PRIVATE_KEY")
VAPID_PRIVATE_KEY_FILE = Path(
    env_str("VAPID_PRIVATE_KEY_FILE", str(VAR_DIR / "vapid_private_key.pem"))
)
# Who push services contact about our traffic: a mailto: or https: URL.
VAPID_SUBJECT = env_str("VAPID_SUBJECT", "mailto:admin@localhost" if DEBUG else "")
if not VAPID_SUBJECT:
    raise ImproperlyConfigured(
        "VAPID_SUBJECT (a mailto: or https: URL push services can reach you at) is required "
        "when DEBUG is off"
    )
if not re.fullmatch(r"mailto:[^@\s]+@[^@\s]+|https://[^\s/?#]+[^\s]*", VAPID_SUBJECT):
    raise ImproperlyConfigured(
        f"VAPID_SUBJECT must be a mailto: or https: URL, got {VAPID_SUBJECT!r}"
    )
# Seconds a push service keeps a message for an offline browser. Zero would silently lose
# every push to a browser that is not running, hence the floor.
WEBPUSH_TTL = env_int("WEBPUSH_TTL", 8 * 3600, minimum=60)
WEBPUSH_CONNECT_TIMEOUT = env_float("WEBPUSH_CONNECT_TIMEOUT", 5.0, minimum=0.1)
WEBPUSH_READ_TIMEOUT = env_float("WEBPUSH_READ_TIMEOUT", 10.0, minimum=0.1)
# The only places a subscription endpoint may point at, so the dispatcher can never be made
# to POST to an arbitrary or internal address. An entry is a host (https on port 443; a
# leading "*." matches any subdomain) or an exact origin such as "http://127.0.0.1:8765"
# (tests put their fake push service here).
PUSH_SERVICE_HOSTS = env_list(
    "PUSH_SERVICE_HOSTS",
    [
        "fcm.googleapis.com",  # Chrome, Edge, Opera, Samsung Internet…
        "updates.push.services.mozilla.com",  # Firefox
        "web.push.apple.com",  # Safari (macOS, iOS home-screen apps)
        "*.notify.windows.com",  # Windows Push Notification Services
    ],
)
# A subscription's JSON is a few hundred bytes; anything much larger is not one.
PUSH_SUBSCRIPTION_MAX_BYTES = 4096

# --- Marketplaces -------------------------------------------------------------------------
# Source name -> class implementing watches.marketplaces.base.Marketplace (the demo's is added
# with the demo app, below).
MARKETPLACE_ADAPTERS: dict[str, str] = {}
# Rakuten Ichiba Item Search (watches.marketplaces.rakuten; docs/marketplaces.md). Every
# application id comes with its access key: RAKUTEN_APP_ID with RAKUTEN_ACCESS_KEY, or several
# applications as RAKUTEN_APP_IDS=id:key,id:key, each with its own allowance of
# RAKUTEN_RATE_PER_SECOND. An id without its key stops start-up.
RAKUTEN_ACCESS_KEYS = rakuten_applications()  # application id -> access key
RAKUTEN_APP_IDS = list(RAKUTEN_ACCESS_KEYS)
RAKUTEN_APP_ID = RAKUTEN_APP_IDS[0] if RAKUTEN_APP_IDS else ""
RAKUTEN_ACCESS_KEY = RAKUTEN_ACCESS_KEYS.get(RAKUTEN_APP_ID, "")
# Rakuten retires versions with little notice (a retired one answers every request with
# 400 "API Configuration not found"): the version is a setting of its own, on the base URL.
RAKUTEN_API_VERSION = env_str("RAKUTEN_API_VERSION", "20260701")
RAKUTEN_API_URL = env_str(
    "RAKUTEN_API_URL", "https://openapi.rakuten.co.jp/ichibams/api/IchibaItem/Search"
)
check_rakuten_api_url(RAKUTEN_API_URL, RAKUTEN_API_VERSION)  # the adapter asks base/version
# An application registered as a web application must name its registered site: sent as
# Origin and Referer. A backend registration is checked by IP address instead: leave unset.
RAKUTEN_SITE_URL = env_str("RAKUTEN_SITE_URL")
site_origin("RAKUTEN_SITE_URL", RAKUTEN_SITE_URL)  # refuses what is not a site's URL
RAKUTEN_RATE_PER_SECOND = env_float("RAKUTEN_RATE_PER_SECOND", 1.0, minimum=0.01)
RAKUTEN_CONNECT_TIMEOUT = env_float("RAKUTEN_CONNECT_TIMEOUT", 3.05, minimum=0.01)
RAKUTEN_READ_TIMEOUT = env_float("RAKUTEN_READ_TIMEOUT", 10.0, minimum=0.01)
# A caller held off longer than this by the limiter (after a 429) gets `rate_limited` for the
# rest of its batch instead of blocking.
RAKUTEN_MAX_WAIT_SECONDS = env_float("RAKUTEN_MAX_WAIT_SECONDS", 10.0, minimum=0)
if RAKUTEN_APP_ID:
    MARKETPLACE_ADAPTERS["rakuten"] = "watches.marketplaces.rakuten.RakutenMarketplace"
# Yahoo! Shopping Item Search v3: one item by code, or every shop's offer of a JAN code in one
# request (watches.marketplaces.yahoo). Its budget is its own, per application id: Yahoo!
# JAPAN allows 50,000 requests a day (reset at midnight, Japan time) besides one a second, and
# answers 403 past it until midnight. The default spreads the day's 50,000 evenly (0.58 a
# second), so prices keep coming all day; an id raised on application may set more.
YAHOO_APP_ID = env_str("YAHOO_APP_ID")
YAHOO_API_URL = env_str(
    "YAHOO_API_URL", "https://shopping.yahooapis.jp/ShoppingWebService/V3/itemSearch"
)
YAHOO_REQUESTS_PER_DAY = 50_000
YAHOO_RATE_PER_SECOND = env_float(
    "YAHOO_RATE_PER_SECOND", YAHOO_REQUESTS_PER_DAY / 86_400, minimum=0.01
)
YAHOO_CONNECT_TIMEOUT = env_float("YAHOO_CONNECT_TIMEOUT", 3.05, minimum=0.01)
YAHOO_READ_TIMEOUT = env_float("YAHOO_READ_TIMEOUT", 10.0, minimum=0.01)
YAHOO_MAX_WAIT_SECONDS = env_float("YAHOO_MAX_WAIT_SECONDS", 10.0, minimum=0)
# Offers asked for per JAN code, cheapest first. At most 50: the most one request answers
# (docs/marketplaces.md: a `results` above the maximum is refused, one below only answers less).
YAHOO_OFFERS_PER_PRODUCT = env_int("YAHOO_OFFERS_PER_PRODUCT", 50, minimum=1)
if YAHOO_OFFERS_PER_PRODUCT > 50:
    raise ImproperlyConfigured(
        "YAHOO_OFFERS_PER_PRODUCT must be at most 50 (the most one request answers), "
        f"got {YAHOO_OFFERS_PER_PRODUCT}"
    )
if YAHOO_APP_ID:
    MARKETPLACE_ADAPTERS["yahoo"] = "watches.marketplaces.yahoo.YahooMarketplace"
# A marketplace that answered a configuration fault (a retired version, a refused key, id,
# site or IP address) is halted for the whole fleet: nothing is asked of it but one probe
# every this many seconds, and a probe it answers resumes it (watches.marketplaces.halts).
# Five minutes: a person's fix takes about that long to deploy, a probe then costs 12
# requests an hour, and polling resumes well within one POLL_MINUTES of the fix.
MARKETPLACE_PROBE_SECONDS = env_int("MARKETPLACE_PROBE_SECONDS", 300, minimum=1)

# --- Price polling ------------------------------------------------------------------------
# How often a watched listing is checked (it is due again after half of this; the poll plan's
# staleness and the coverage figures count in it).
POLL_MINUTES = env_int("POLL_MINUTES", 15, minimum=1)
# How often a polling run starts (`watches-poll`). Apart from POLL_MINUTES because a run on a
# rate-limited marketplace spends what the budget gives in the time it may take
# (POLL_MAX_SECONDS): runs every 15 minutes of at most 2 minutes spent an eighth of an
# application id's allowance (bench/bench_capacity.py); runs back to back spend all of it
# but the dispatcher's share.
POLL_EVERY_MINUTES = env_int("POLL_EVERY_MINUTES", 2, minimum=1)
# An unchanged observation is written to history only when the last point is at least this
# old: history stays compact, yet never goes silent for long.
POLL_HISTORY_MIN_MINUTES = env_int("POLL_HISTORY_MIN_MINUTES", 180, minimum=1)
# Listings fetched per adapter call (and per short write transaction).
POLL_BATCH_SIZE = env_int("POLL_BATCH_SIZE", 100, minimum=1)
# The scheduled run starts no new batch after this long (the rest waits for the next run,
# least recently polled first). A batch on a rate-limited marketplace takes up to
# POLL_BATCH_SIZE / its rate seconds (100 s for Rakuten at 1/s): this plus one batch must stay
# below Q_TIMEOUT.
POLL_MAX_SECONDS = env_int("POLL_MAX_SECONDS", 120, minimum=1)
# The share of a rate-limited marketplace's budget a polling run leaves to the dispatcher's
# re-fetches (watches.polling.plan).
POLL_REFETCH_SHARE = env_float("POLL_REFETCH_SHARE", 0.2, minimum=0)
if POLL_REFETCH_SHARE >= 1:
    raise ImproperlyConfigured(f"POLL_REFETCH_SHARE must be below 1, got {POLL_REFETCH_SHARE}")
# The request shapes the poll plan may choose (watches.polling.plan): one item, a shop's feed
# (its items most recently updated first), a product's offers at every shop. Each is used
# only where the marketplace answers it; "item" alone is the plan of one request an item.
POLL_SHAPES = env_list("POLL_SHAPES", ["item", "shop", "product"])
if not set(POLL_SHAPES) <= {"item", "shop", "product"} or "item" not in POLL_SHAPES:
    raise ImproperlyConfigured(
        f"POLL_SHAPES takes item (always), shop and product, got {','.join(POLL_SHAPES)}"
    )

# --- Demo world ---------------------------------------------------------------------------
# The `demo` app (a built-in marketplace, its catalogue, `demo_market`, `seed_demo`, the demo
# tick) is installed only with DEMO_MARKET: by default under DEBUG, or where no real
# marketplace is configured (it is then the only one). A production with Rakuten has no demo
# app, admin page, command or schedule; production apps never import it.
DEMO_MARKET = env_bool("DEMO_MARKET", DEBUG or not (RAKUTEN_APP_ID or YAHOO_APP_ID))
# Move the demo market on a schedule (`demo-tick`), so a running `make run` shows detections,
# sends and drops on its own.
DEMO_TICK = env_bool("DEMO_TICK", DEBUG and DEMO_MARKET)
DEMO_TICK_MINUTES = env_int("DEMO_TICK_MINUTES", 1, minimum=1)
# A price or stock set by hand (`demo_market set`, admin) is left alone by the tick this long:
# a poll sees it, the dispatcher re-checks and sends, and the person sees it happen.
DEMO_HOLD_MINUTES = env_int("DEMO_HOLD_MINUTES", 30, minimum=1)
if DEMO_TICK and not DEMO_MARKET:
    raise ImproperlyConfigured("DEMO_TICK needs DEMO_MARKET: there is no demo market to move")
if DEMO_MARKET:
    INSTALLED_APPS.append("demo")
    MARKETPLACE_ADAPTERS["demo"] = "demo.marketplace.DemoMarketplace"

# --- django-q2 and the cache --------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
# Throttles (the test-notification cooldown) must be shared by every web process: on Redis
# when there is one, else in the process (fine for the single process of `make run`).
# Page fragments (watches.pages.pagecache) and the prices version that invalidates them must be
# shared by the web processes and the cluster that polls: Redis, or files under var/.
CACHES: dict[str, dict[str, Any]]
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "yasugoro",
        },
        "pages": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "yasugoro",
        },
        # Run guards and re-check marks every worker process shares (watches.tasks.poll,
        # watches.polling.inflight).
        "locks": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "yasugoro-locks",
        },
    }
else:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "pages": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache" / "pages"),
            "OPTIONS": {"MAX_ENTRIES": 5000},
        },
        # Run guards and re-check marks the processes of this host share (watches.tasks.poll,
        # watches.polling.inflight): an add that holds across processes (yasugoro.hostcache).
        "locks": {
            "BACKEND": "yasugoro.hostcache.HostLockCache",
            "LOCATION": str(VAR_DIR / "cache" / "locks"),
            # Past MAX_ENTRIES the file cache deletes a third of its entries at random, live
            # guards among them; released marks are deleted, so live ones stay far fewer.
            "OPTIONS": {"MAX_ENTRIES": 1_000_000},
        },
    }
Q_CLUSTER: dict[str, Any] = {
    "name": "yasugoro",
    "workers": env_int("Q_WORKERS", 2, minimum=1),
    "timeout": env_int("Q_TIMEOUT", 240, minimum=10),
    # retry must exceed timeout, or django-q2 re-queues a task that is still running.
    "retry": env_int("Q_TIMEOUT", 240, minimum=10) + 60,
    "max_attempts": 1,
    "catch_up": False,
    "ack_failures": True,
    "save_limit": 500,
    # The admin's name for django-q2's models, in the staff user's language.
    "label": gettext_lazy("Tasks"),
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

# --- Monitoring ---------------------------------------------------------------------------
# /metrics answers a request with `Authorization: Bearer <METRICS_TOKEN>`, and (unless
# switched off) one from this host that no proxy relayed.
METRICS_TOKEN = env_str("METRICS_TOKEN")
METRICS_ALLOW_LOCALHOST = env_bool("METRICS_ALLOW_LOCALHOST", True)
# /readyz fails when the last dispatch cycle started longer ago than this (it runs every
# minute) or when the oldest due row has waited longer than the lag limit.
READYZ_MAX_CYCLE_AGE_SECONDS = env_int("READYZ_MAX_CYCLE_AGE_SECONDS", 180, minimum=60)
READYZ_MAX_QUEUE_LAG_SECONDS = env_int("READYZ_MAX_QUEUE_LAG_SECONDS", 300, minimum=1)

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "yasugoro": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "demo": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "outbox": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "watches": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "monitoring": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    },
}
