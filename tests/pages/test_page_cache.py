"""Whole pages cached for visitors the page says nothing personal to (watches.pages.pagecache.page):
served again without a query, each with the visitor's own CSRF token, stale as soon as
prices change; and never for a visitor with messages, watches, or a URL of its own."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from tests.factories import ListingFactory, with_history
from watches import devices
from watches.models import Device, Listing, PricePoint, Watch
from watches.pages import pagecache
from watches.pausing import pause_listings

pytestmark = pytest.mark.django_db


def _token(body: str) -> str:
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', body)
    assert token is not None, "the page has a form with its CSRF token"
    return token.group(1)


def test_home_is_served_again_without_a_query_with_each_visitor_s_own_token(
    django_assert_num_queries,
):
    ListingFactory(name="スコッティ 12ロール", price=480)
    first = Client(enforce_csrf_checks=True).get("/")
    assert "スコッティ 12ロール" in first.content.decode()
    other = Client(enforce_csrf_checks=True)
    with django_assert_num_queries(0):
        again = other.get("/")
    body = again.content.decode()
    assert "スコッティ 12ロール" in body
    assert pagecache.CSRF_PLACEHOLDER not in body
    # The token in the cached page is this visitor's: its forms post.
    response = other.post("/i18n/setlang/", {"language": "en", "csrfmiddlewaretoken": _token(body)})
    assert response.status_code == 302


def test_a_new_price_shows_at_once(client):
    listing = ListingFactory(name="ネピア 18ロール", price=700)
    assert "¥700" in client.get("/").content.decode()
    assert "¥700" in client.get(f"/listings/{listing.pk}/").content.decode()
    listing.price = 650
    listing.save()  # moves the prices version on, as saving observations does
    assert "¥650" in client.get("/").content.decode()
    assert "¥650" in client.get(f"/listings/{listing.pk}/").content.decode()


def test_each_language_has_its_own_page():
    ListingFactory()
    english = Client(HTTP_ACCEPT_LANGUAGE="en").get("/").content.decode()
    japanese = Client(HTTP_ACCEPT_LANGUAGE="ja").get("/").content.decode()
    assert '<html lang="en">' in english
    assert '<html lang="ja">' in japanese
    assert '<html lang="en">' in Client(HTTP_ACCEPT_LANGUAGE="en").get("/").content.decode()


def test_a_page_with_a_message_waiting_is_rendered_for_its_visitor(client):
    listing = ListingFactory()
    client.get("/")  # the shared home page is cached now
    # Not followed: the message waits for the next page this browser opens.
    client.post(f"/listings/{listing.pk}/", {"trigger": "target_price", "target_price": "500"})
    assert "Watching. We check the price again" in client.get("/").content.decode()
    assert "Watching. We check the price again" not in client.get("/").content.decode()


def test_a_device_s_own_watches_are_never_served_from_the_shared_page(client):
    listing = ListingFactory()
    assert "You are watching this" not in client.get(f"/listings/{listing.pk}/").content.decode()
    client.post(f"/listings/{listing.pk}/", {"trigger": "target_price", "target_price": "500"})
    assert Watch.objects.count() == 1
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "You are watching this" in body
    assert "No sign-up" not in body


def test_a_device_without_a_watch_here_gets_its_own_page_without_the_sign_up_line(client):
    listing, other = ListingFactory(), ListingFactory()
    assert "No sign-up" in Client().get(f"/listings/{listing.pk}/").content.decode()
    client.post(f"/listings/{other.pk}/", {"trigger": "target_price", "target_price": "500"})
    assert Device.objects.count() == 1
    assert client.cookies.get(devices.cookie_name())
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "No sign-up" not in body
    assert "Watch this item" in body


def test_a_url_with_other_parameters_is_rendered_and_sends_the_language_switch_back_to_it(
    client,
):
    ListingFactory()
    client.get("/")
    body = client.get("/", {"utm_source": "x"}).content.decode()
    assert 'name="next" value="/?utm_source=x"' in body
    assert 'name="next" value="/?page=2"' in client.get("/?page=2").content.decode()


def test_the_memory_layer_keeps_at_most_its_size(monkeypatch, client):
    monkeypatch.setattr(pagecache, "LOCAL_ENTRIES", 3)
    ListingFactory()
    for page in range(1, 8):
        assert client.get("/", {"page": page}).status_code == 200
    assert len(pagecache._local) <= 3


def test_the_shared_listing_page_needs_no_query_and_knows_a_pause_or_a_deletion(
    client, django_assert_num_queries, django_capture_on_commit_callbacks
):
    listing = ListingFactory()
    client.get(f"/listings/{listing.pk}/")
    with django_assert_num_queries(0):
        assert client.get(f"/listings/{listing.pk}/").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):  # the pages go stale on commit
        pause_listings([listing.pk], actor="staff")
    assert "We no longer track this item" in client.get(f"/listings/{listing.pk}/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        Listing.objects.filter(pk=listing.pk).delete()
    assert client.get(f"/listings/{listing.pk}/").status_code == 404


# --- a listing's page is stale when that listing changes, not when another does -------------


def _poll(listing: Listing, price: int, at) -> None:
    """One answer for `listing`, kept as a poll keeps it."""
    from watches.marketplaces.base import Observation
    from watches.polling.observations import observe

    answer = Observation(listing.item_code, price, True, at, shipping=0)
    observe([(listing, answer)], at).save()


def test_another_listing_s_new_price_leaves_a_listing_page_cached(
    client, django_assert_num_queries, django_capture_on_commit_callbacks
):
    listing, other = ListingFactory(price=700), ListingFactory(price=800)
    client.get(f"/listings/{listing.pk}/")
    with django_capture_on_commit_callbacks(execute=True):
        _poll(other, 650, timezone.now())
    with django_assert_num_queries(0):
        assert "¥700" in client.get(f"/listings/{listing.pk}/").content.decode()
    assert "¥650" in client.get(f"/listings/{other.pk}/").content.decode()
    assert "¥650" in client.get("/").content.decode(), "the home page shows every price"


@time_machine.travel(dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_poll_that_adds_no_point_shows_its_time_and_keeps_the_chart_cached(
    client, django_capture_on_commit_callbacks, django_assert_num_queries
):
    now = timezone.now()
    listing = with_history(ListingFactory(price=700, shipping=0), [700, 700], now=now)
    _poll(listing, 700, now)
    first = client.get(f"/listings/{listing.pk}/").content.decode()
    later = now + dt.timedelta(minutes=15)
    with django_capture_on_commit_callbacks(execute=True):
        _poll(listing, 700, later)  # the same price, a minute later: no new point
    assert PricePoint.objects.filter(listing=listing).count() == 3
    # The listing and its newest point are read; the frame, facts and chart come cached.
    with django_assert_num_queries(2):
        body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert (
        "Price last checked Nov 29, 12:15."
        in Client(HTTP_ACCEPT_LANGUAGE="en").get(f"/listings/{listing.pk}/").content.decode()
    )
    assert body != first
    assert _chart(body) == _chart(first)


@time_machine.travel(dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_failed_check_makes_its_listing_page_say_so_and_no_price_page_stale(
    client, django_capture_on_commit_callbacks, django_assert_num_queries
):
    """The listing's cached page would go on saying "Price last checked" at the earlier
    check; the home page shows no time of a check, and no price changed."""
    from watches.marketplaces.base import FetchError, FetchKind
    from watches.polling.observations import observe

    now = timezone.now()
    listing = with_history(ListingFactory(price=700, shipping=0), [700, 700], now=now)
    _poll(listing, 700, now)
    assert (
        "Price last checked Nov 29, 12:00."
        in client.get(f"/listings/{listing.pk}/").content.decode()
    )
    client.get("/")
    with django_capture_on_commit_callbacks(execute=True):
        failed = FetchError(FetchKind.SERVER, "500")
        observe([(listing, failed)], now + dt.timedelta(minutes=5)).save()
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert "Price last checked" not in body
    assert "The last price check, Nov 29, 12:05, failed." in body
    with django_assert_num_queries(0):
        client.get("/")


@time_machine.travel(dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC), tick=False)
def test_a_poll_that_finds_a_new_price_redraws_the_facts_and_the_chart(
    client, django_capture_on_commit_callbacks
):
    now = timezone.now()
    listing = with_history(ListingFactory(price=700, shipping=0), [720, 700], now=now)
    first = client.get(f"/listings/{listing.pk}/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        _poll(listing, 610, now + dt.timedelta(minutes=15))
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert '<dd class="price">¥610</dd>' in body
    assert _chart(body) != _chart(first)
    assert "¥610" in _chart(body), "the new low is drawn and written in the table"


def test_the_empty_watch_form_is_shared_by_listings_that_show_the_same(client):
    one = ListingFactory(low_90=500, units_per_pack=12, unit_label="roll")
    two = ListingFactory(low_90=500, units_per_pack=12, unit_label="roll")
    three = ListingFactory(low_90=400, units_per_pack=12, unit_label="roll")
    forms = [_form(client.get(f"/listings/{x.pk}/").content.decode()) for x in (one, two, three)]
    assert forms[0] == forms[1]
    assert "¥500" in forms[0] and "¥400" in forms[2]


def _chart(body: str) -> str:
    return body[body.index('<figure class="chart">') : body.index("</figure>")]


def _form(body: str) -> str:
    form = body[body.index('<form method="post" action="#watch"') :]
    form = form[: form.index("</form>")]
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", form)
