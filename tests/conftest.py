"""Shared fixtures. Tests run on SQLite by default; `-m postgres` tests skip unless
DATABASE_URL points at PostgreSQL."""

from __future__ import annotations

import contextlib

import pytest
from django.db import connection

from tests.fakes.channel import RecordingChannel
from tests.fakes.push_service import FakePushService


def pytest_addoption(parser):
    parser.addoption(
        "--reliability-full",
        action="store_true",
        default=False,
        help="run the reliability suite at full size (also: RELIABILITY_FULL=1); "
        "without it, `-m reliability` tests run a small version in a few seconds",
    )


# The `browser` fixture of the browser tests.
pytest_plugins = ["tests.browser"]


def pytest_collection_modifyitems(config, items):
    from django.conf import settings

    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://… (CI does)")
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _english_unless_asked(settings):
    """The product speaks Japanese to a browser that states no language (LANGUAGE_CODE "ja").
    Tests read the English source strings, so a request without Accept-Language, and code
    outside any request, get English here; tests of the languages themselves send
    Accept-Language or restore "ja" (tests/pages/test_i18n.py)."""
    settings.LANGUAGE_CODE = "en"


@pytest.fixture(autouse=True)
def _fresh_cache():
    """The cache (throttles, e.g. the test-notification cooldown) lives in the process: no
    test may see another's entries, especially as database ids are reused between tests."""
    from django.core.cache import caches

    for cache in caches.all():
        cache.clear()
    yield
    for cache in caches.all():
        cache.clear()


@pytest.fixture(autouse=True)
def _no_metrics_from_other_tests():
    """Counts for /metrics wait in the process until a flush: none may leak from one test's
    database into another's (or, at exit, into a real database)."""
    from common import counters

    counters.discard_pending()
    yield
    counters.discard_pending()


@pytest.fixture
def smtp_server(settings):
    """A real SMTP server on 127.0.0.1; Django's mail goes to it for the test."""
    from tests.fakes.smtp_server import FakeSmtpServer

    server = FakeSmtpServer().start()
    for name, value in server.settings().items():
        setattr(settings, name, value)
    yield server
    server.stop()


@pytest.fixture
def recording_channel(settings):
    """Route the console channel to a recorder of deliveries."""
    settings.OUTBOX_CHANNEL_CLASSES = {
        **settings.OUTBOX_CHANNEL_CLASSES,
        "console": "tests.fakes.channel.RecordingChannel",
    }
    RecordingChannel.reset()
    yield RecordingChannel
    RecordingChannel.reset()


@pytest.fixture
def vendor() -> str:
    return connection.vendor


@pytest.fixture
def push_service(settings):
    """A fake push service on 127.0.0.1, put on the endpoint allowlist the only way there is:
    PUSH_SERVICE_HOSTS, as an exact origin."""
    service = FakePushService(subject=settings.VAPID_SUBJECT).start()
    settings.PUSH_SERVICE_HOSTS = [*settings.PUSH_SERVICE_HOSTS, service.origin]
    yield service
    service.stop()


@pytest.fixture
def ichiba(settings):
    """A fake Rakuten Ichiba API on 127.0.0.1, configured as the `rakuten` marketplace."""
    from tests.fakes.ichiba import ACCESS_KEY, APP_ID, FakeIchiba

    # One application with its key, whatever the environment configures; a backend
    # registration (no site to name).
    settings.RAKUTEN_APP_IDS = []
    settings.RAKUTEN_ACCESS_KEYS = {}
    settings.RAKUTEN_ACCESS_KEY = ACCESS_KEY
    settings.RAKUTEN_SITE_URL = ""
    with _fake_marketplace(settings, FakeIchiba(), "rakuten", APP_ID) as fake:
        yield fake


@pytest.fixture
def yahoo(settings):
    """A fake Yahoo! Shopping Item Search API on 127.0.0.1, configured as the `yahoo`
    marketplace."""
    from tests.fakes.yahoo import APP_ID, FakeYahoo

    with _fake_marketplace(settings, FakeYahoo(), "yahoo", APP_ID) as fake:
        yield fake


@contextlib.contextmanager
def _fake_marketplace(settings, fake, source: str, app_id: str):
    """Start `fake` and make it marketplace `source` (its settings are `<SOURCE>_…`; its
    adapter `watches.marketplaces.<source>.<Source>Marketplace`) for one test."""
    from watches.marketplaces.ratelimit import forget_limiter

    prefix = source.upper()
    fake.start()
    setattr(settings, f"{prefix}_APP_ID", app_id)
    setattr(settings, f"{prefix}_API_URL", fake.url)
    settings.MARKETPLACE_ADAPTERS = {
        **settings.MARKETPLACE_ADAPTERS,
        source: f"watches.marketplaces.{source}.{source.title()}Marketplace",
    }
    rate = getattr(settings, f"{prefix}_RATE_PER_SECOND")
    # The limiter is process-wide: a 429 in one test must not hold off the next.
    forget_limiter(f"{source}:{app_id}", rate)
    try:
        yield fake
    finally:
        fake.stop()
        forget_limiter(f"{source}:{app_id}", rate)
