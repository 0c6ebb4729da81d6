"""Japanese and English: complete catalogues, and every page rendered in both with nothing
left in the other language."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import zoneinfo
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import polib
import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import translation

from outbox.messages import build_message
from outbox.models import Outbox, Reason, Status
from tests.factories import DeviceFactory, ListingFactory, WatchFactory, device_with_cookie
from watches.marketplaces.base import Observation
from watches.models import Device, PricePoint, Trigger
from watches.polling.history import refresh_stats
from watches.triggers import Judgement

pytestmark = pytest.mark.django_db

BASE = Path(django_settings.BASE_DIR)
CATALOGUES = {lang: BASE / "locale" / lang / "LC_MESSAGES" / "django.po" for lang in ("ja", "en")}
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]|%%")
# Latin words that are names, not untranslated English.
NAMES = {"Yasugoro", "JavaScript", "iPhone", "iPad", "Cookie", "Web", "URL", "g", "ml"}


def entries(lang: str) -> list[polib.POEntry]:
    return [e for e in polib.pofile(str(CATALOGUES[lang]))]


# --- The catalogues -----------------------------------------------------------------------


def test_the_catalogues_compile():
    call_command("compile_translations")
    for po in CATALOGUES.values():
        assert po.with_suffix(".mo").exists()


@pytest.mark.parametrize("lang", ["ja", "en"])
def test_every_entry_is_translated_and_none_is_fuzzy(lang):
    catalogue = polib.pofile(str(CATALOGUES[lang]))
    assert not catalogue.metadata_is_fuzzy
    assert catalogue.metadata["Language"] == lang
    assert len(catalogue) > 250
    for entry in catalogue:
        assert "fuzzy" not in entry.flags, entry.msgid
        assert not entry.obsolete, entry.msgid
        if entry.msgid_plural:
            assert entry.msgstr_plural and all(entry.msgstr_plural.values()), entry.msgid
        else:
            assert entry.msgstr, entry.msgid


@pytest.mark.parametrize("lang", ["ja", "en"])
def test_translations_keep_every_placeholder(lang):
    for entry in entries(lang):
        wanted = sorted(PLACEHOLDER.findall(entry.msgid))
        for text in entry.msgstr_plural.values() if entry.msgid_plural else [entry.msgstr]:
            assert set(PLACEHOLDER.findall(text)) == set(wanted), entry.msgid
            assert sorted(set(re.findall(r"\{\{ ?(\w+) ?\}\}", text))) == sorted(
                set(re.findall(r"\{\{ ?(\w+) ?\}\}", entry.msgid))
            ), entry.msgid


def test_japanese_is_really_japanese():
    japanese = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
    # Symbols and formats may stay as they are; sentences may not.
    untranslated = [
        e.msgid
        for e in entries("ja")
        if not e.msgid_plural and e.msgstr == e.msgid and len(e.msgid.split()) > 1
    ]
    assert untranslated == []
    assert (
        sum(1 for e in entries("ja") if japanese.search(e.msgstr or e.msgstr_plural.get(0, "")))
        > 250
    )


@pytest.mark.skipif(not shutil.which("xgettext"), reason="GNU gettext's xgettext is not installed")
def test_the_catalogues_hold_every_string_of_the_sources(tmp_path, settings, monkeypatch):
    """makemessages over a copy of the sources and catalogue: nothing new may appear. (A
    copy, because makemessages writes to the `locale` folder it finds beside the sources.)"""
    work = tmp_path / "src"
    for folder in ("watches", "outbox", "demo", "monitoring", "common", "templates", "yasugoro"):
        shutil.copytree(BASE / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__"))
    target = work / "locale" / "ja" / "LC_MESSAGES"
    target.mkdir(parents=True)
    shutil.copy(CATALOGUES["ja"], target / "django.po")
    settings.LOCALE_PATHS = [work / "locale"]
    monkeypatch.chdir(work)
    call_command("makemessages", locale=["ja"], verbosity=0)
    fresh = {
        (e.msgctxt, e.msgid) for e in polib.pofile(str(target / "django.po")) if not e.obsolete
    }
    ours = {(e.msgctxt, e.msgid) for e in entries("ja")}
    assert fresh - ours == set(), "strings missing from the catalogues: run makemessages"


# --- The pages in both languages ----------------------------------------------------------


class _Text(HTMLParser):
    """Visible text and the attributes people see or hear (labels, placeholders, titles)."""

    SPOKEN = {"aria-label", "placeholder", "title", "alt", "value"}

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        for name, value in attrs:
            if value and (name in self.SPOKEN or name.startswith(("data-msg", "data-label"))):
                if name == "value" and tag != "button":
                    continue
                self.parts.append(value)

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def english_left(body: str) -> list[str]:
    """Runs of two or more English words in a page that should be Japanese."""
    parser = _Text()
    parser.feed(body)
    found = []
    for part in parser.parts:
        # Words separated by spaces (a URL or "shop:item" is one token, not English).
        for run in re.findall(r"[A-Za-z][A-Za-z'’-]*(?:[,.:;]?\s+[A-Za-z][A-Za-z'’-]*)+", part):
            words = [w for w in re.findall(r"[A-Za-z'’]+", run) if w not in NAMES]
            if len(words) >= 2:
                found.append(run)
    return found


@pytest.fixture
def world(client):
    """A browser with watches and history, so every page has every part to show."""
    with translation.override("en"):
        # At its 90-day low, so the home page's "cheap right now" shows it too.
        listing = ListingFactory(
            name="スコッティ トイレットペーパー 12ロール",
            shop_name="安ごろショップ",
            category="トイレットペーパー",
            price=880,
        )
        start = dt.datetime.now(dt.UTC) - dt.timedelta(days=40)
        PricePoint.objects.bulk_create(
            PricePoint(
                listing=listing,
                observed_at=start + dt.timedelta(days=i),
                price=1000 - (i % 7) * 20,
                shipping=0,
                in_stock=i % 13 != 0,
            )
            for i in range(40)
        )
        refresh_stats([listing.pk])
        listing.refresh_from_db()
        device, _ = device_with_cookie(client)
        target = WatchFactory(
            device=device, listing=listing, target_price=500, use_unit_price=False
        )
        WatchFactory(
            device=device,
            listing=listing,
            trigger=Trigger.PRICE_DROP,
            target_price=None,
            drop_percent=15,
        )
        WatchFactory(
            device=device, listing=listing, trigger=Trigger.LOWEST, target_price=None, paused=True
        )
        WatchFactory(
            device=device, listing=listing, trigger=Trigger.BACK_IN_STOCK, target_price=None
        )
        now = dt.datetime.now(dt.UTC)
        for days, (status, reason, message) in enumerate(
            [
                (Status.SENT, Reason.DELIVERED, {"price": 880, "body": "今は¥880"}),
                (Status.DROPPED, Reason.CONDITION_LOST, None),
                (Status.FAILED, Reason.DELIVER_NETWORK, None),
                (Status.RETRY, Reason.REFETCH_NETWORK, None),
            ]
        ):
            Outbox.objects.create(
                watch=target,
                device=device,
                channel=device.channel,
                trigger=target.trigger,
                status=status,
                reason=reason,
                detected_at=now - dt.timedelta(days=days),
                next_attempt_at=now,
                sent_message=message,
                sent_at=now if message else None,
            )
    return {"listing": listing, "watch": target}


def pages(world) -> list[str]:
    listing, watch = world["listing"], world["watch"]
    return [
        "/",
        "/?q=トイレット",
        "/?q=nothing-like-this",
        f"/listings/{listing.pk}/",
        "/watches/",
        f"/watches/{watch.pk}/edit/",
        "/notifications/",
        "/settings/",
        "/transfer/" + "x" * 43 + "/",
        "/listings/999999/",
    ]


def test_every_page_in_japanese_has_no_english_left(client, world):
    call_command("compile_translations")
    for url in pages(world):
        response = client.get(url, headers={"accept-language": "ja"})
        assert response.status_code in (200, 404), url
        body = response.content.decode()
        assert '<html lang="ja">' in body, url
        assert "検索" in body and "ウォッチリスト" in body and "設定" in body, url
        assert ">Search<" not in body and "My watches" not in body, url
        assert english_left(body) == [], url


def test_every_page_in_english_is_english(client, world):
    call_command("compile_translations")
    for url in pages(world):
        body = client.get(url, headers={"accept-language": "en"}).content.decode()
        assert '<html lang="en">' in body, url
        assert ">Search<" in body and "My watches" in body, url
        assert "検索" not in body and "ウォッチリスト" not in body, url
        assert english_left(body), "the detector of English left in Japanese pages finds English"


@pytest.mark.parametrize(
    ("url", "ja", "en"),
    [
        ("/", "いま安いもの", "Cheap right now"),
        ("/", "商品のリンクから追加", "Add an item by its link"),
        ("/listings/{listing}/", "価格の推移", "Price history"),
        ("/listings/{listing}/", "お知らせする条件", "Tell me when"),
        ("/listings/{listing}/", "指定価格以下になったら", "At or below my price"),
        ("/listings/{listing}/", "90日間の最安値", "90-day low"),
        ("/watches/", "一時停止中", "Paused"),
        ("/watches/", "通常価格より15%以上安くなったら", "15% or more below its typical price"),
        ("/watches/", "1ロールあたり", "per roll"),
        (
            "/notifications/",
            "お知らせする前に価格が元に戻りました。",
            "The price went back up before we could tell you.",
        ),
        ("/notifications/", "送信準備中", "On the way"),
        ("/notifications/", "お知らせした価格：¥880", "We told you: ¥880."),
        ("/settings/", "テスト通知を送る", "Send a test notification"),
    ],
)
def test_sample_keys_translate(client, world, url, ja, en):
    call_command("compile_translations")
    url = url.format(listing=world["listing"].pk)
    if url == "/watches/":
        # A per-unit watch, to see the unit in both languages.
        WatchFactory(
            device=world["watch"].device,
            listing=world["listing"],
            trigger=Trigger.BACK_IN_STOCK,
            target_price=40,
            use_unit_price=True,
        )
    ja_body = client.get(url, headers={"accept-language": "ja"}).content.decode()
    en_body = client.get(url, headers={"accept-language": "en"}).content.decode()
    assert ja in ja_body
    assert en in en_body and en not in ja_body


def test_a_browser_that_states_no_language_gets_japanese(client, settings):
    settings.LANGUAGE_CODE = "ja"
    body = client.get("/").content.decode()
    assert '<html lang="ja">' in body and "検索" in body


def test_the_language_switch_changes_the_pages_and_the_devices_notifications(client):
    device, _ = device_with_cookie(client, language="ja")
    response = client.post(
        "/language", {"language": "en", "next": "/watches/"}, headers={"accept-language": "ja"}
    )
    assert response.status_code == 302 and response["Location"] == "/watches/"
    device.refresh_from_db()
    assert device.language == "en"
    assert "My watches" in client.get("/watches/").content.decode()
    client.post("/language", {"language": "ja", "next": "/"})
    device.refresh_from_db()
    assert device.language == "ja"
    assert "ウォッチリスト" in client.get("/").content.decode()


def test_an_unknown_language_changes_nothing(client):
    device, _ = device_with_cookie(client, language="ja")
    client.post("/language", {"language": "xx", "next": "/"})
    device.refresh_from_db()
    assert device.language == "ja"


def test_a_new_device_takes_the_language_of_the_page(client):
    listing = ListingFactory()
    client.post(
        f"/listings/{listing.pk}/", {"trigger": "lowest"}, headers={"accept-language": "ja"}
    )
    assert Device.objects.get().language == "ja"


def test_notification_texts_are_written_in_the_devices_language():
    call_command("compile_translations")
    listing = ListingFactory(name="スコッティ", units_per_pack=12, unit_label="roll")
    watch = WatchFactory(
        listing=listing, device=DeviceFactory(language="ja"), target_price=70, use_unit_price=True
    )
    row = Outbox(
        watch=watch,
        device=watch.device,
        trigger=watch.trigger,
        detected_at=dt.datetime(2026, 3, 1, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo")),
    )
    fresh = Observation(
        item_code=listing.item_code,
        price=780,
        shipping=0,
        in_stock=True,
        observed_at=row.detected_at,
    )
    judgement = Judgement(True, "", Decimal("65.00"), Decimal("70"))
    ja = build_message(row, watch, listing, fresh, judgement, "ja")
    en = build_message(row, watch, listing, fresh, judgement, "en")
    assert ja.body == "現在1ロールあたり¥65.00（1パック¥780）— ご指定の¥70以下です。"
    assert en.body == "Now ¥65.00 per roll (¥780 a pack) — at or below your ¥70."


def test_dates_are_in_tokyo_and_in_the_readers_language(client):
    call_command("compile_translations")
    device, _ = device_with_cookie(client)
    watch = WatchFactory(device=device)
    moment = dt.datetime(2026, 11, 28, 16, 30, tzinfo=dt.UTC)  # 01:30 on the 29th in Tokyo
    Outbox.objects.create(
        watch=watch,
        device=device,
        channel=device.channel,
        trigger=watch.trigger,
        status=Status.DROPPED,
        reason=Reason.OUT_OF_STOCK,
        detected_at=moment,
        next_attempt_at=moment,
        updated_at=moment,
    )
    this_year = dt.datetime.now(zoneinfo.ZoneInfo("Asia/Tokyo")).year == 2026
    ja = client.get("/notifications/", headers={"accept-language": "ja"}).content.decode()
    en = client.get("/notifications/", headers={"accept-language": "en"}).content.decode()
    assert ("11月29日 01:30" if this_year else "2026年11月29日 01:30") in ja
    assert ("Nov 29, 01:30" if this_year else "Nov 29, 2026, 01:30") in en


def test_the_error_pages_speak_both_languages(client):
    from django.template.loader import render_to_string

    call_command("compile_translations")
    # 500.html is rendered with no request and no context processors at all.
    with translation.override("ja"):
        assert "問題が発生しました" in render_to_string("500.html")
    with translation.override("en"):
        assert "Something went wrong" in render_to_string("500.html")
    response = client.get("/listings/999999/", headers={"accept-language": "ja"})
    assert response.status_code == 404 and "このページはありません" in response.content.decode()


# --- the admin in the staff user's language -------------------------------------------------


class _AdminText(_Text):
    """The admin's own words: data (JSON, listing names, user names) is not language."""

    def __init__(self) -> None:
        super().__init__()
        self._pre = 0

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self._pre += 1
        if not self._pre:
            super().handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        if tag == "pre":
            self._pre -= 1
        super().handle_endtag(tag)

    def handle_data(self, data):
        if not self._pre:
            super().handle_data(data)


def admin_english_left(body: str) -> list[str]:
    main = body.split('id="content"', 1)[1]
    parser = _AdminText()
    parser.feed(main)
    return [run for run in english_left_in(parser.parts) if run not in ADMIN_NAMES]


def english_left_in(parts: list[str]) -> list[str]:
    found = []
    for part in parts:
        for run in re.findall(r"[A-Za-z][A-Za-z'’-]*(?:[,.:;]?\s+[A-Za-z][A-Za-z'’-]*)+", part):
            words = [w for w in re.findall(r"[A-Za-z'’]+", run) if w not in NAMES]
            if len(words) >= 2:
                found.append(run)
    return found


# Names, not sentences: the zone's; and the demo catalogue's model, whose name its own app
# (the demo world) gives.
ADMIN_NAMES = {"Asia/Tokyo", "Demo products", "Demo product"}


@pytest.fixture
def admin_world(admin_client):
    from tests.factories import DispatchRunFactory, OutboxEventFactory, OutboxFactory

    call_command("compile_translations")
    listing = ListingFactory(name="スコッティ 12ロール")
    watch = WatchFactory(listing=listing)
    now = dt.datetime.now(dt.UTC)
    row = OutboxFactory(
        watch=watch,
        status=Status.SENT,
        reason=Reason.DELIVERED,
        sent_message={"title": "¥980"},
        sent_at=now,
    )
    OutboxEventFactory(outbox=row, to_status=Status.RETRY, reason=Reason.REFETCH_NETWORK)
    OutboxEventFactory(outbox=row, data={"fresh": {"price": 980}, "value": "980"})
    for i, (status, reason) in enumerate(
        [
            (Status.DROPPED, Reason.CONDITION_LOST),
            (Status.FAILED, Reason.DELIVER_SERVER),
            (Status.RETRY, Reason.REFETCH_RATE_LIMITED),
            (Status.PENDING, ""),
        ],
        start=1,
    ):
        OutboxFactory(
            watch=watch, status=status, reason=reason, detected_at=now - dt.timedelta(days=i)
        )
    DispatchRunFactory(started_at=now, finished_at=now)
    return {"row": row, "listing": listing}


def admin_pages(world) -> list[str]:
    return [
        "/admin/",
        "/admin/outbox/outbox/overview/",
        "/admin/outbox/outbox/",
        "/admin/outbox/outbox/?status__exact=failed&queue=due",
        f"/admin/outbox/outbox/{world['row'].pk}/change/",
        "/admin/outbox/dispatchrun/",
    ]


# The domain's admin pages: what Yasugoro added there (filters, actions, columns) and the
# names of the domain's models and fields.
DOMAIN_PAGES = {
    "/admin/watches/listing/": (
        [
            "価格取得の状態",
            "追跡を一時停止し、送信待ちのお知らせを取りやめる",
            "関連ページ",
            "お知らせ",
        ],
        ["polling health", "Pause tracking, and drop their pending notifications", "elsewhere"],
    ),
    "/admin/watches/watch/": (["状態", "有効"], ["state", "Live"]),
    "/admin/watches/device/": (
        ["プッシュ通知の登録", "無効（削除または取り消し）"],
        ["push subscription"],
    ),
}


def domain_admin_pages(world) -> list[str]:
    """The domain's changelists and one change form of each model: every column, filter
    and field label there is a name Yasugoro gave."""
    listing = world["listing"]
    watch = listing.watches.get()
    return [
        *DOMAIN_PAGES,
        f"/admin/watches/listing/{listing.pk}/change/",
        f"/admin/watches/watch/{watch.pk}/change/",
        f"/admin/watches/device/{watch.device_id}/change/",
    ]


def test_the_admin_in_japanese_has_none_of_our_english_left(admin_client, admin_world):
    for url, (ja, _) in DOMAIN_PAGES.items():
        body = admin_client.get(url, headers={"accept-language": "ja"}).content.decode()
        assert all(text in body for text in ja), url
    for url in [*admin_pages(admin_world), *domain_admin_pages(admin_world)]:
        response = admin_client.get(url, headers={"accept-language": "ja"})
        assert response.status_code == 200, url
        body = response.content.decode()
        assert '<html lang="ja"' in body, url
        assert admin_english_left(body) == [], url
    overview = admin_client.get(
        "/admin/outbox/outbox/overview/", headers={"accept-language": "ja"}
    ).content.decode()
    for text in ("送信キューの概要", "キューの遅れ", "状態別", "理由別", "条件を満たさなくなった"):
        assert text in overview


def test_the_admin_in_english_is_english(admin_client, admin_world):
    for url, (_, en) in DOMAIN_PAGES.items():
        body = admin_client.get(url, headers={"accept-language": "en"}).content.decode()
        assert all(text in body for text in en), url
    for url in admin_pages(admin_world):
        body = admin_client.get(url, headers={"accept-language": "en"}).content.decode()
        assert '<html lang="en"' in body, url
        assert "送信キュー" not in body and "キューの遅れ" not in body, url
    overview = admin_client.get(
        "/admin/outbox/outbox/overview/", headers={"accept-language": "en"}
    ).content.decode()
    for text in ("Outbox overview", "Queue lag", "By status", "by reason", "Condition no longer"):
        assert text in overview


@pytest.mark.parametrize(
    ("lang", "message"),
    [
        (
            "ja",
            "0 件を再キューしました。1 件はスキップしました（送信済み (1)）— 再キューできるのは "
            "失敗、再試行中 の行だけです。",
        ),
        (
            "en",
            "0 requeued; 1 skipped because they are sent (1) — only failed or retrying rows can"
            " be requeued.",
        ),
    ],
)
def test_lever_messages_speak_the_staff_users_language(admin_client, admin_world, lang, message):
    from django.contrib.messages import get_messages

    response = admin_client.post(
        "/admin/outbox/outbox/",
        {"action": "requeue_rows", "_selected_action": [admin_world["row"].pk]},
        headers={"accept-language": lang},
        follow=True,
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == [message]
