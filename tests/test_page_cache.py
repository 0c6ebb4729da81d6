"""Whole pages cached for visitors the page says nothing personal to (watches.pagecache.page):
served again without a query, each with the visitor's own CSRF token, stale as soon as
prices change; and never for a visitor with messages, watches, or a URL of its own."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.factories import ListingFactory
from watches import devices, pagecache
from watches.models import Device, Listing, Watch
from watches.pausing import pause_listings

pytestmark = pytest.mark.django_db


def _token(body: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', body).group(1)


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
