"""The helpers both apps share (`common/`): each rule once, tested once, here."""

from __future__ import annotations

import datetime as dt
import sys

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from common.bulk import update_by_id
from common.instances import load
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


# --- the file cache ---------------------------------------------------------------------------


def test_the_file_cache_counts_its_files_once_every_so_many_writes_and_still_culls(
    tmp_path, monkeypatch
):
    from common import filecache

    monkeypatch.setattr(filecache, "CULL_EVERY", 10)
    cache = filecache.FileCache(str(tmp_path), {"OPTIONS": {"MAX_ENTRIES": 20}})
    listings = 0
    real = cache._list_cache_files

    def counted():
        nonlocal listings
        listings += 1
        return real()

    monkeypatch.setattr(cache, "_list_cache_files", counted)
    for n in range(100):
        cache.set(f"page-{n}", "x" * 100)
    assert listings == 10, "one count of the files per 10 writes, not one per write"
    assert len(real()) <= 20 + 10, "culled: over MAX_ENTRIES by at most CULL_EVERY"
    assert cache.get("page-99") == "x" * 100


@pytest.mark.parametrize("absent", [0, 30], ids=["a few keys", "more than it tries one by one"])
def test_the_file_cache_deletes_many_keys_those_present_and_only_those(tmp_path, absent):
    from common import filecache

    cache = filecache.FileCache(str(tmp_path), {})
    cache.set("kept", "k")
    cache.set("page-1", "a")
    cache.set("page-2", "b", version=2)
    never_written = [f"never-written-{n}" for n in range(absent)]

    cache.delete_many(["page-1", "page-2", *never_written])
    assert cache.get("page-1") is None
    assert cache.get("page-2", version=2) == "b", "another version's file is not that key's"
    assert cache.get("kept") == "k"

    cache.delete_many(["page-2", *never_written], version=2)
    assert cache.get("page-2", version=2) is None
    assert cache.get("kept") == "k"


def test_the_file_cache_names_each_key_once_and_forgets_the_names_past_its_bound(
    tmp_path, monkeypatch
):
    """`delete_many` hashes a key into its file's name once: the same listings' versions are
    forgotten cycle after cycle. Past its bound it forgets them all, and a key deleted after
    the names were forgotten is still deleted. Only strings' names are remembered (True and 1
    are one key of a dict, two names of files)."""
    from common import filecache

    monkeypatch.setattr(filecache, "_NAMES_KEPT", 40)
    cache = filecache.FileCache(str(tmp_path), {})
    hashed = []
    real = cache._file_name

    def counted(key, version):
        hashed.append(key)
        return real(key, version)

    monkeypatch.setattr(cache, "_file_name", counted)
    keys = [f"page-{n}" for n in range(30)]
    for round_ in range(3):
        for key in keys[:3]:
            cache.set(key, round_)
        cache.delete_many(keys)
        assert [cache.get(key) for key in keys[:3]] == [None] * 3
    assert hashed == keys, "each key hashed once over three rounds"

    others = [f"other-{n}" for n in range(30)]
    cache.set("other-29", "x")
    cache.delete_many(others)  # 60 names: past the bound, forgotten before the next call
    assert cache.get("other-29") is None
    cache.set("page-0", "y")
    cache.delete_many(keys)
    assert cache.get("page-0") is None, "deleted by a name hashed again"
    assert len(cache._names) == len(keys), "what was remembered before is forgotten"
    assert hashed[-len(keys) :] == keys

    cache.set(1, "one")
    cache.set(True, "true")
    cache.delete_many([*keys, 1])
    cache.delete_many([*keys, True])
    assert (cache.get(1), cache.get(True)) == (None, None), "each deleted by its own name"


def test_the_file_cache_deletes_many_before_its_folder_exists(tmp_path):
    from common import filecache

    cache = filecache.FileCache(str(tmp_path / "not-yet"), {})
    cache.delete_many([f"page-{n}" for n in range(30)])  # nothing to delete, nothing raised
    cache.set("page-1", "a")
    assert cache.get("page-1") == "a"


# --- Instances built without Model.__init__ --------------------------------------------------


def _same_instance(built, listed) -> None:
    """Two instances alike as the ORM sees them: class, loaded values, deferred fields, where
    they came from and what is cached on them."""
    assert type(built) is type(listed)
    assert {k: v for k, v in vars(built).items() if k != "_state"} == {
        k: v for k, v in vars(listed).items() if k != "_state"
    }
    assert built.get_deferred_fields() == listed.get_deferred_fields()
    assert (built._state.db, built._state.adding) == (listed._state.db, listed._state.adding)
    assert built._state.fields_cache.keys() == listed._state.fields_cache.keys()
    for name, related in listed._state.fields_cache.items():
        if related is None:
            assert built._state.fields_cache[name] is None
        else:
            _same_instance(built._state.fields_cache[name], related)


@pytest.mark.django_db
def test_load_builds_the_instances_the_orm_would_with_related_and_deferred_fields():
    from outbox.models import Outbox
    from tests.factories import OutboxFactory

    rows = [OutboxFactory(), OutboxFactory(sent_message={"title": "x"})]
    queryset = (
        Outbox.objects.filter(pk__in=[row.pk for row in rows])
        .select_related("watch", "watch__listing", "watch__product")
        .defer("detail", "watch__created_at")
        .order_by("id")
    )

    built, listed = load(queryset), list(queryset)

    assert len(built) == len(listed) == 2
    for one, other in zip(built, listed, strict=True):
        _same_instance(one, other)
    # A product-less watch's LEFT JOIN found nothing: cached as None, no query on access.
    with CaptureQueriesContext(connection) as queries:
        assert built[0].watch.product is None
        assert built[0].watch.listing.pk == rows[0].watch.listing_id
    assert len(queries) == 0


@pytest.mark.django_db
def test_load_converts_datetimes_as_the_orm_does_whatever_the_database_holds(monkeypatch):
    """On SQLite, a naive UTC datetime is made aware without Django's converter; a time kept
    with an offset (a raw write) and NULL still go through it, and all read as the ORM reads
    them."""
    from tests.factories import ListingFactory
    from watches.models import Listing

    plain, offset, empty = ListingFactory.create_batch(3)
    moment = dt.datetime(2026, 12, 3, 10, 8, 40, 569931, tzinfo=dt.UTC)
    Listing.objects.filter(pk=plain.pk).update(last_polled_at=moment, stats_at=moment)
    Listing.objects.filter(pk=empty.pk).update(last_polled_at=None, stats_at=None)
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE watches_listing SET last_polled_at = %s WHERE id = %s",
                ["2026-12-03 19:08:40.5+09:00", offset.pk],
            )
    queryset = Listing.objects.order_by("id")
    listed = list(queryset)

    if connection.vendor == "sqlite":
        from django.db.backends.sqlite3.operations import DatabaseOperations

        calls = []
        djangos = DatabaseOperations.convert_datetimefield_value

        def counted(self, value, expression, connection):
            calls.append(value)
            return djangos(self, value, expression, connection)

        monkeypatch.setattr(DatabaseOperations, "convert_datetimefield_value", counted)
    built = load(queryset)

    assert len(built) == len(listed) == 3
    for one, other in zip(built, listed, strict=True):
        _same_instance(one, other)
    assert built[0].last_polled_at == moment and built[0].last_polled_at.tzinfo is dt.UTC
    assert built[2].last_polled_at is None
    if connection.vendor == "sqlite":
        assert built[1].last_polled_at == dt.datetime(2026, 12, 3, 10, 8, 40, 500000, tzinfo=dt.UTC)
        # Django's converter saw NULLs and the time kept with its offset, no naive datetime.
        assert listed[1].last_polled_at in calls
        assert all(value is None or value.tzinfo is not None for value in calls)


@pytest.mark.django_db
def test_an_instance_from_load_reads_a_deferred_field_on_access_and_saves_as_an_update():
    from tests.factories import ListingFactory
    from watches.models import Listing

    listing = ListingFactory(name="before")
    [built] = load(Listing.objects.filter(pk=listing.pk).defer("name"))

    with CaptureQueriesContext(connection) as queries:
        assert built.name == "before"
    assert len(queries) == 1
    built.price = 777
    built.save(update_fields=["price"])

    assert Listing.objects.count() == 1
    assert Listing.objects.get(pk=listing.pk).price == 777


@pytest.mark.django_db
def test_load_builds_instances_without_the_orms_constructor(monkeypatch):
    from django.db.models import Model

    from tests.factories import ListingFactory
    from watches.models import Listing

    ListingFactory.create_batch(2)

    def refuse(cls, *args, **kwargs):
        raise AssertionError("built through Model.from_db")

    monkeypatch.setattr(Model, "from_db", classmethod(refuse))
    queryset = Listing.objects.order_by("id")

    assert len(load(queryset)) == 2
    with pytest.raises(AssertionError, match="from_db"):
        list(queryset)


@pytest.mark.django_db
def test_load_leaves_a_model_with_an_init_receiver_to_the_orm():
    from django.db.models import signals

    from tests.factories import ListingFactory
    from watches.models import Listing

    ListingFactory.create_batch(2)
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    signals.post_init.connect(receiver, sender=Listing)
    try:
        built = load(Listing.objects.order_by("id"))
    finally:
        signals.post_init.disconnect(receiver, sender=Listing)

    assert seen == built and len(built) == 2


@pytest.mark.django_db
def test_load_of_nothing_and_of_an_annotated_queryset_gives_what_the_orm_gives():
    from django.db.models import Count

    from tests.factories import ListingFactory, WatchFactory
    from watches.models import Listing

    WatchFactory.create_batch(2, listing=ListingFactory())
    annotated = Listing.objects.annotate(n=Count("watches"))

    assert load(Listing.objects.filter(pk__in=[])) == []
    assert [listing.n for listing in load(annotated)] == [2]


@pytest.mark.django_db
def test_load_by_id_builds_what_the_orm_would_with_deferred_fields():
    """Listings with every kind of value the dispatcher reads — datetimes with and without a
    fraction, None, booleans, a product's id — alike as the ORM's, deferred fields loaded on
    first read; an id that names nothing is left out."""
    from common.instances import load_by_id
    from tests.factories import ListingFactory
    from watches.models import Listing, Product

    at = dt.datetime(2026, 12, 5, 4, 17, 0, 123456, tzinfo=dt.UTC)
    listings = [
        ListingFactory(last_polled_at=at, stats_at=at.replace(microsecond=0), in_stock=True),
        ListingFactory(last_polled_at=None, stats_at=None, in_stock=None, paused=True),
        ListingFactory(shipping=0, jan="4901750404404", in_stock=False),
    ]
    product = Product.objects.create(jan="4901750404404")
    Listing.objects.filter(pk=listings[2].pk).update(product=product)
    ids = [listing.pk for listing in listings]
    deferred = ("search_text", "created_at", "jan")

    built = load_by_id(Listing, [*ids, ids[0], 10**9], deferred)

    listed = {o.pk: o for o in Listing.objects.defer(*deferred).filter(pk__in=ids)}
    assert built.keys() == listed.keys() == set(ids)
    for pk in ids:
        _same_instance(built[pk], listed[pk])
    first, second, third = (built[pk] for pk in ids)
    assert first.last_polled_at == at and first.last_polled_at.tzinfo is dt.UTC
    assert (type(first.in_stock), second.in_stock, type(third.in_stock)) == (bool, None, bool)
    assert (type(second.paused), second.paused) == (bool, True)
    assert third.product_id == product.pk and first.product_id is None
    with CaptureQueriesContext(connection) as queries:
        assert third.jan == "4901750404404"
    assert len(queries) == 1, "a deferred field is read when first asked for"
    assert load_by_id(Listing, []) == {}


@pytest.mark.django_db
def test_load_by_id_defers_by_name_or_attname_keeps_the_key_and_refuses_a_field_it_lacks():
    from common.instances import load_by_id
    from tests.factories import ListingFactory
    from watches.models import Listing

    listing = ListingFactory()

    built = load_by_id(Listing, [listing.pk], ("product_id", "id", "name"))[listing.pk]

    assert built.pk == listing.pk
    assert built.get_deferred_fields() == {"product_id", "name"}
    with pytest.raises(ValueError, match="no field nmae"):
        load_by_id(Listing, [listing.pk], ("nmae",))


@pytest.mark.django_db
def test_load_by_id_reads_a_time_written_with_its_own_offset():
    """A raw statement given an aware value keeps the offset in SQLite's text: read as the
    ORM reads it."""
    from common.instances import load_by_id
    from tests.factories import ListingFactory
    from watches.models import Listing

    listing = ListingFactory()
    at = dt.datetime(2026, 12, 5, 13, 0, tzinfo=dt.timezone(dt.timedelta(hours=9)))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE watches_listing SET last_polled_at = %s WHERE id = %s",
            [at.isoformat(" ") if connection.vendor == "sqlite" else at, listing.pk],
        )

    built = load_by_id(Listing, [listing.pk])[listing.pk]

    assert built.last_polled_at == Listing.objects.get(pk=listing.pk).last_polled_at == at


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite keeps times as text")
@pytest.mark.django_db
@pytest.mark.parametrize(
    "text",
    ["2026-12-05", "2026-12-5 4:17:00", "2026-12-05T04:17:00Z", "2026-12-05 04:17:00.5", ""],
)
def test_load_by_id_reads_any_text_sqlite_holds_as_the_orm_does(text):
    """Text written by hand (a date alone, single digits, a Z, a short fraction, nothing):
    an aware time or None, as the ORM reads it — a naive value would stop a dispatch cycle
    at its first comparison."""
    from common.instances import load_by_id
    from tests.factories import ListingFactory
    from watches.models import Listing

    listing = ListingFactory()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE watches_listing SET last_polled_at = %s WHERE id = %s", [text, listing.pk]
        )

    built = load_by_id(Listing, [listing.pk])[listing.pk].last_polled_at

    assert built == Listing.objects.get(pk=listing.pk).last_polled_at
    assert built is None or built.tzinfo is not None


@pytest.mark.django_db
def test_load_by_id_leaves_a_model_with_fields_it_does_not_read_to_the_orm():
    """The outbox's rows carry JSON (converted by the ORM): read through `load`, alike."""
    from common.instances import load_by_id
    from outbox.models import Outbox
    from tests.factories import OutboxFactory

    row = OutboxFactory(sent_message={"title": "x"})

    built = load_by_id(Outbox, [row.pk])[row.pk]

    _same_instance(built, Outbox.objects.get(pk=row.pk))
    assert built.sent_message == {"title": "x"}


# --- Fewer collections within a block --------------------------------------------------------


def test_fewer_collections_nests_across_threads_and_puts_back_what_was_there():
    import gc
    import threading

    from common.longlived import fewer_collections

    before = gc.get_threshold()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with fewer_collections(threshold=before[0] + 5_000):
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(5)
    with fewer_collections(threshold=before[0] + 5_000):
        assert gc.get_threshold() == (before[0] + 5_000, *before[1:])
    # The other block is still running: its threshold stays.
    assert gc.get_threshold() == (before[0] + 5_000, *before[1:])
    leave.set()
    thread.join(5)

    assert gc.get_threshold() == before


def test_the_models_a_dispatch_batch_loads_take_the_fast_path():
    """The batch's outbox rows, watches, listings and devices: a receiver, an `__init__` or a
    converting field added to one of them would quietly send it back through the ORM."""
    from common.instances import _builds_plainly
    from outbox.models import Outbox
    from watches.models import Device, Listing, Watch

    assert [model for model in (Outbox, Watch, Listing, Device) if not _builds_plainly(model)] == []


# --- PostgreSQL timestamps parsed in C ----------------------------------------------------


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the timestamptz loader is psycopg's")
@pytest.mark.django_db
def test_postgresql_timestamps_are_read_by_the_c_loader_as_djangos_would_read_them():
    from psycopg import adapters
    from psycopg.pq import Format
    from psycopg.types.datetime import TimestamptzLoader

    from common.pgtimestamps import _UtcTimestampLoader

    connection.ensure_connection()
    assert connection.connection.adapters.get_loader(1184, Format.TEXT) is _UtcTimestampLoader
    moments = [
        dt.datetime(2026, 12, 3, 10, 8, 40, 569931, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 3, 10, 8, 40, tzinfo=dt.UTC),  # no fraction
        dt.datetime(2026, 3, 1, 0, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=9))),
        dt.datetime(1, 1, 1, 0, 0, tzinfo=dt.UTC),
        dt.datetime(9999, 1, 1, tzinfo=dt.UTC),
    ]
    sql = "SELECT unnest(%s::timestamptz[])"
    with connection.cursor() as cursor:
        cursor.execute(sql, [moments])
        ours = [row[0] for row in cursor.fetchall()]
    assert ours == moments
    assert all(value.tzinfo is dt.UTC for value in ours)
    # What psycopg's own Python loader (Django's base) gives, in the same zone.
    with connection.cursor() as cursor:
        cursor.cursor.adapters.register_loader("timestamptz", TimestamptzLoader)
        cursor.execute(sql, [moments])
        assert [row[0] for row in cursor.fetchall()] == ours
    assert adapters.get_loader(1184, Format.TEXT) is not _UtcTimestampLoader  # only ours


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the timestamptz loader is psycopg's")
@pytest.mark.django_db
def test_django_keeps_its_timestamp_loader_on_a_connection_in_another_zone():
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    from common import pgtimestamps

    connection.ensure_connection()
    adapters = connection.connection.adapters
    ours = adapters.get_loader(1184, Format.TEXT)
    register_tzloader(dt.UTC, connection.connection)  # as Django's template has it
    djangos = adapters.get_loader(1184, Format.TEXT)
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Tokyo'")
    try:
        pgtimestamps.install(None, connection)  # as when the connection is created
        assert adapters.get_loader(1184, Format.TEXT) is djangos
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
        adapters.register_loader("timestamptz", ours)
    pgtimestamps.install(None, connection)
    assert adapters.get_loader(1184, Format.TEXT) is ours
