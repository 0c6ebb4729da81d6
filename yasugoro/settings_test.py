"""Settings for the test suite: production settings, minus what only gets in the way of a
test client on plain HTTP."""

import base64
import os

from cryptography.hazmat.primitives.asymmetric import ec

# Production settings refuse to start without a VAPID subject when DEBUG is off.
os.environ.setdefault("VAPID_SUBJECT", "mailto:tests@yasugoro.example")
# The tests move prices on the demo marketplace, whatever else is configured.
os.environ.setdefault("DEMO_MARKET", "1")

from yasugoro.settings import *  # noqa: F403

SECURE_SSL_REDIRECT = False
SECURE_HSTS_SECONDS = 0
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
DEVICE_COOKIE_SECURE = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# A throwaway VAPID key per test run, so no test touches var/ or a real key.
VAPID_PRIVATE_KEY = (
    base64.urlsafe_b64encode(
        ec.generate_private_key(ec.SECP256R1()).private_numbers().private_value.to_bytes(32, "big")
    )
    .rstrip(b"=")
    .decode()
)
# The fake Ichiba and the fake Yahoo answer at once: a stalled answer must time out soon (but
# not so soon that a loaded CI machine turns a normal answer into a timeout), and the
# client-side rate limit (tested on its own with a fake clock) must not slow every test down.
RAKUTEN_CONNECT_TIMEOUT = 2.0
RAKUTEN_READ_TIMEOUT = 1.0
RAKUTEN_RATE_PER_SECOND = 1000.0
YAHOO_CONNECT_TIMEOUT = 2.0
YAHOO_READ_TIMEOUT = 1.0
YAHOO_RATE_PER_SECOND = 1000.0
# Never scheduled by the test database's migrate, whatever DEBUG says.
DEMO_TICK = False
# Tests clear the cache around every test: it must never be a shared Redis (REDIS_URL may be
# set for the django-q2 broker of a test's qcluster processes).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "pages": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "pages"},
    "locks": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "locks"},
}
