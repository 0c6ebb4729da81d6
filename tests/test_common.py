"""The helpers both apps share (`common/`): each rule once, tested once, here."""

from __future__ import annotations

import datetime as dt
import math
import sys
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from common import deadlines
from common.bulk import update_by_id
from common.registry import configured_instance, import_all
from common.retry_after import MAX_SECONDS, parse_retry_after
from common.text import clip
from common.weburl import NotAWebURL, parse_web_url

NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


# --- Retry-After ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        ("  7 ", 7.0),
        ("0", 0.0),
        ("1.5", 1.5),  # not RFC 9110, but harmless and some servers send it
        ("Sun, 01 Mar 2026 12:00:30 GMT", 30.0),  # IMF-fixdate
        ("Sunday, 01-Mar-26 12:00:30 GMT", 30.0),  # obsolete RFC 850 form
        ("Sun Mar  1 12:00:30 2026", 30.0),  # obsolete asctime form: GMT
        ("Sun, 01 Mar 2026 11:00:00 GMT", 0.0),  # already past
        ("9999999999", MAX_SECONDS),  # centuries: capped
        ("Sun, 01 Mar 2126 12:00:00 GMT", MAX_SECONDS),
    ],
)
def test_retry_after_reads_delay_seconds_and_http_dates(value, seconds):
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "-5",
        "+5",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e3",
        "0x10",
        "soon",
        "12 s",
        "99999999999",
        "Mon, 99 Foo 2026 12:00:00 GMT",
    ],
)
def test_retry_after_refuses_what_is_neither_seconds_nor_a_date(value):
    assert parse_retry_after(value, now=NOW) is None


def test_retry_after_cap_is_the_callers_to_choose():
    assert parse_retry_after("600", cap=60) == 60


# --- clip ----------------------------------------------------------------------------------


def test_clip_leaves_short_text_alone_and_marks_a_cut():
    assert clip("abc", 3) == "abc"
    assert clip("abcd", 3) == "ab…"
    assert len(clip("x" * 1000, 150)) == 150


def test_clip_needs_room_for_the_mark():
    with pytest.raises(ValueError):
        clip("abc", 0)


# --- registry ------------------------------------------------------------------------------


def test_registry_builds_a_new_instance_of_the_configured_class(settings):
    settings.OUTBOX_CHANNEL_CLASSES = {"console": "outbox.channels.console.ConsoleChannel"}
    first = configured_instance("OUTBOX_CHANNEL_CLASSES", "console", what="delivery channel")
    second = configured_instance("OUTBOX_CHANNEL_CLASSES", "console", what="delivery channel")
    assert type(first).__name__ == "ConsoleChannel" and first is not second


def test_registry_names_what_is_missing(settings):
    settings.MARKETPLACE_ADAPTERS = {}
    with pytest.raises(LookupError, match=r"no marketplace adapter configured for 'x'"):
        configured_instance("MARKETPLACE_ADAPTERS", "x", what="marketplace adapter")


def test_registry_imports_every_configured_class_ahead_and_leaves_a_broken_one_for_its_use(
    settings, tmp_path, monkeypatch, caplog
):
    (tmp_path / "registry_probe_channel.py").write_text("class Probe:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "registry_probe_channel", raising=False)
    settings.OUTBOX_CHANNEL_CLASSES = {
        "probe": "registry_probe_channel.Probe",
        "broken": "registry_no_such_module.Channel",
    }
    import_all("OUTBOX_CHANNEL_CLASSES")
    assert "registry_probe_channel" in sys.modules
    monkeypatch.delitem(sys.modules, "registry_probe_channel")
    assert "'broken'" in caplog.text and "does not import" in caplog.text
    # Its first use still says what is wrong, where it is used.
    with pytest.raises(ImportError):
        configured_instance("OUTBOX_CHANNEL_CLASSES", "broken", what="delivery channel")


# --- web URLs ------------------------------------------------------------------------------


def test_a_plain_url_is_read_into_its_parts():
    url = parse_web_url("HTTPS://Item.Rakuten.co.jp:443/shop/item/?x=1")
    assert (url.scheme, url.host, url.port, url.explicit_port) == (
        "https",
        "item.rakuten.co.jp",
        443,
        True,
    )
    assert (url.path, url.query, url.origin) == (
        "/shop/item/",
        "x=1",
        ("https", "item.rakuten.co.jp", 443),
    )
    assert parse_web_url("http://127.0.0.1:8765").port == 8765
    assert parse_web_url("http://example.test/").port == 80


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("fcm.googleapis.com/abc", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("ftp://example.test/", "scheme"),
        ("https:/example.test/", "scheme"),
        ("https://", "no_host"),
        ("https://user@example.test/", "userinfo"),
        ("https://example.test@evil.example/", "userinfo"),
        ("https://evil.example\\@example.test/", "characters"),
        ("https://exa mple.test/", "characters"),
        ("https://example.test/\x00", "characters"),
        ("https://example.test/é", "characters"),
        ('https://example.test/"onmouseover', "characters"),
        ("https://example.test/<script>", "characters"),
        ("https://[::1]/", "host"),
        ("https://ex%41mple.test/", "host"),
        ("https://ex_ample.test/", "host"),
        ("https://example.test:/", "port"),
        ("https://example.test:99999/", "port"),
        ("https://example.test:+80/", "port"),
        ("https://example.test:0/", "port"),
    ],
)
def test_a_url_two_parsers_could_read_differently_is_refused(text, problem):
    with pytest.raises(NotAWebURL) as refused:
        parse_web_url(text)
    assert refused.value.problem == problem


# --- bulk update ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_update_by_id_writes_each_rows_own_values_and_nothing_else():
    from decimal import Decimal

    from tests.factories import WatchFactory
    from watches.models import Watch

    first, second, untouched = WatchFactory(), WatchFactory(), WatchFactory()
    rows = [(first.pk, (Decimal("75.50"), NOW)), (second.pk, (None, NOW - dt.timedelta(days=1)))]

    assert update_by_id(Watch, ("last_notified_price", "last_notified_at"), rows) == 2
    assert update_by_id(Watch, ("last_notified_price",), []) == 0

    values = dict(Watch.objects.values_list("pk", "last_notified_price"))
    assert values == {first.pk: Decimal("75.50"), second.pk: None, untouched.pk: None}
    assert Watch.objects.get(pk=second.pk).last_notified_at == NOW - dt.timedelta(days=1)


@pytest.mark.django_db
def test_update_by_id_prepares_equal_values_of_different_types_each_their_own_way():
    """1 and True are one key of a dict, but a JSON column stores them apart; a dict (not
    hashable) is prepared as it is; a value shared by many rows is written to each."""
    from outbox.models import Outbox
    from tests.factories import OutboxFactory

    one, true, shared, other = OutboxFactory.create_batch(4)
    rows = [
        (one.pk, (1,)),
        (true.pk, (True,)),
        (shared.pk, ({"title": "x"},)),
        (other.pk, ({"title": "x"},)),
    ]

    assert update_by_id(Outbox, ("sent_message",), rows) == 4

    stored = dict(Outbox.objects.values_list("pk", "sent_message"))
    assert stored[one.pk] == 1 and stored[one.pk] is not True
    assert stored[true.pk] is True
    assert stored[shared.pk] == stored[other.pk] == {"title": "x"}


@pytest.mark.django_db
def test_update_by_id_lowers_a_lowering_field_and_never_raises_it():
    from tests.factories import ListingFactory
    from watches.models import Listing

    lower, higher, unknown, no_value = ListingFactory.create_batch(4, low_90=900)
    Listing.objects.filter(pk=unknown.pk).update(low_90=None)
    rows = [
        (lower.pk, (1100, 800)),
        (higher.pk, (1200, 950)),
        (unknown.pk, (1300, 990)),
        (no_value.pk, (1400, None)),
    ]

    assert update_by_id(Listing, ("price", "low_90"), rows, lowering=("low_90",)) == 4

    values = dict(Listing.objects.values_list("pk", "price"))
    lows = dict(Listing.objects.values_list("pk", "low_90"))
    assert [values[pk] for pk, _ in rows] == [1100, 1200, 1300, 1400], "the others as given"
    assert [lows[pk] for pk, _ in rows] == [800, 900, 990, 900]


@pytest.mark.django_db
def test_update_by_id_unless_later_keeps_a_row_whose_stored_time_is_later():
    import datetime as dt

    from tests.factories import ListingFactory
    from watches.models import Listing

    at = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)
    newer, older, equal, never = ListingFactory.create_batch(4, price=1000, last_polled_at=at)
    Listing.objects.filter(pk=never.pk).update(last_polled_at=None)
    rows = [
        (newer.pk, (900, at - dt.timedelta(microseconds=1))),  # stored one is later: kept
        (older.pk, (900, at + dt.timedelta(seconds=5))),
        (equal.pk, (900, at)),
        (never.pk, (900, at - dt.timedelta(days=1))),
    ]

    fields = ("price", "last_polled_at")
    assert update_by_id(Listing, fields, rows, unless_later="last_polled_at") == 4

    rows_now = Listing.objects.values_list("pk", *fields)
    state = {pk: (price, polled) for pk, price, polled in rows_now}
    assert state[newer.pk] == (1000, at), "an older state is not written over a later one"
    assert state[older.pk] == (900, at + dt.timedelta(seconds=5))
    assert state[equal.pk] == (900, at)
    assert state[never.pk] == (900, at - dt.timedelta(days=1))
    with pytest.raises(ValueError, match="unless_later"):
        update_by_id(Listing, ("price",), [(newer.pk, (900,))], unless_later="last_polled_at")


@pytest.mark.django_db
def test_update_by_id_refuses_one_name_for_its_lowering_fields():
    from tests.factories import ListingFactory
    from watches.models import Listing

    listing = ListingFactory(low_90=900, price=1000)
    with pytest.raises(TypeError, match="collection of field names"):
        update_by_id(Listing, ("price", "low_90"), [(listing.pk, (1100, 950))], lowering="low_90")
    listing.refresh_from_db()
    assert (listing.price, listing.low_90) == (1000, 900), "nothing written"


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the unnest statement is PostgreSQL's path"
)
@pytest.mark.django_db
def test_update_by_id_on_postgresql_is_one_statement_whatever_the_rows():
    from tests.factories import ListingFactory
    from watches.models import Listing

    listings = ListingFactory.create_batch(30)
    rows = [(listing.pk, (2000 + i, None)) for i, listing in enumerate(listings)]
    with CaptureQueriesContext(connection) as queries:
        assert update_by_id(Listing, ("price", "shipping"), rows) == 30
    sql = [q["sql"] for q in queries]
    assert len(sql) == 2 and "FOR UPDATE" in sql[0] and "unnest" in sql[1]
    assert sorted(Listing.objects.values_list("price", "shipping")) == [
        (2000 + i, None) for i in range(30)
    ]
    with CaptureQueriesContext(connection) as queries:
        update_by_id(Listing, ("price",), [(listings[0].pk, (1,))], locked=True)
    assert len(queries) == 1  # the caller holds the locks: no SELECT … FOR UPDATE
    assert Listing.objects.get(pk=listings[0].pk).price == 1


# --- one of many values -------------------------------------------------------------------


@pytest.mark.django_db
def test_one_of_finds_the_rows_whose_value_is_among_many_ids_or_codes():
    from common.lookups import one_of
    from tests.factories import ListingFactory
    from watches.models import Listing

    listings = ListingFactory.create_batch(5)
    wanted = [listings[0].pk, listings[3].pk, 10**12]  # an id no row has, too
    assert set(Listing.objects.filter(one_of("pk", wanted)).values_list("pk", flat=True)) == {
        listings[0].pk,
        listings[3].pk,
    }
    codes = [listings[1].item_code, listings[4].item_code, "no-such-code"]
    found = Listing.objects.filter(one_of("item_code", codes), paused=False)
    assert sorted(found.values_list("item_code", flat=True)) == sorted(codes[:2])
    rest = Listing.objects.exclude(one_of("pk", wanted)).values_list("pk", flat=True)
    assert set(rest) == {listings[1].pk, listings[2].pk, listings[4].pk}


@pytest.mark.django_db
def test_one_of_nothing_matches_nothing_without_asking_the_database():
    from common.lookups import one_of
    from tests.factories import ListingFactory
    from watches.models import Listing

    ListingFactory()
    with CaptureQueriesContext(connection) as queries:
        assert list(Listing.objects.filter(one_of("pk", []))) == []
    assert len(queries) == 0


@pytest.mark.django_db
def test_one_of_sends_its_values_as_one_array_on_postgresql_and_placeholders_on_sqlite():
    from common.lookups import one_of
    from watches.models import Listing

    ids = list(range(1, 501))
    sql, params = Listing.objects.filter(one_of("pk", ids)).query.sql_with_params()
    if connection.vendor == "postgresql":
        assert "= ANY(%s)" in sql and params == (ids,)
    else:
        assert f"IN ({', '.join(['%s'] * 500)})" in sql and params == tuple(ids)


@pytest.mark.parametrize(
    "values",
    [[1, "2"], [dt.date(2026, 3, 1)], [1.5], [None]],
    ids=["ints-and-strings", "dates", "floats", "none"],
)
def test_one_of_refuses_values_it_could_not_send_as_they_are(values):
    from common.lookups import one_of

    with pytest.raises(TypeError, match="OneOf takes"):
        one_of("pk", values)


def test_email_url_becomes_djangos_email_settings():
    from django.core.exceptions import ImproperlyConfigured

    from yasugoro.env import email_settings_from_url

    values = email_settings_from_url("smtp+tls://user%40x:p%3Ass@smtp.example?timeout=7")
    assert values["EMAIL_HOST"] == "smtp.example" and values["EMAIL_PORT"] == 587
    assert values["EMAIL_HOST_USER"] == "user@x" and values["EMAIL_HOST_PASSWORD"] == "p:ss"
    assert values["EMAIL_USE_TLS"] is True and values["EMAIL_USE_SSL"] is False
    assert values["EMAIL_TIMEOUT"] == 7.0
    assert email_settings_from_url("smtps://h:2465")["EMAIL_PORT"] == 2465
    assert email_settings_from_url("smtps://h")["EMAIL_USE_SSL"] is True
    assert email_settings_from_url("console:")["EMAIL_BACKEND"].endswith("console.EmailBackend")
    for bad in ("http://h", "smtp://", "smtp://h:port", "smtp://h?timeout=soon"):
        with pytest.raises(ImproperlyConfigured):
            email_settings_from_url(bad)


@pytest.mark.parametrize(
    ("name", "value"),
    [("EMAIL_URL", "http://mail.example"), ("SITE_URL", "yasugoro.example"), ("EMAIL_PORT", "x")],
)
def test_a_bad_mail_setting_stops_start_up_naming_it(name, value):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "DEBUG": "1", name: value}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert name in done.stderr


def test_a_deadline_is_the_earliest_future_moment_noted_and_reaches_the_collection_around():
    now = time.time()
    with deadlines.collecting() as outer:
        deadlines.note(now + 600)
        with deadlines.collecting() as inner:
            deadlines.note(now + 60)
            deadlines.note(now - 5)  # already past: changes nothing to come
            deadlines.note(now + 120)
        deadlines.note(now + 300)
    assert inner.at == now + 60
    assert outer.at == now + 60, "what was built from the inner part changes with it"
    deadlines.note(now + 1)  # outside any collection: ignored


def test_nothing_noted_is_no_deadline():
    with deadlines.collecting() as deadline:
        pass
    assert deadline.at == math.inf
