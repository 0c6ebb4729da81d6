"""The server-rendered pages people use: search, listing page, chart, escaping, query counts."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation

from tests.factories import ListingFactory, with_history
from watches.models import PricePoint
from watches.pages.charts import price_chart
from watches.polling.history import refresh_stats
from watches.search.query import cheap_now
from watches.triggers import Point

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def _history(listing, prices: list[int | None]) -> None:
    with_history(listing, prices, now=NOW)


def test_search_finds_a_listing_by_its_japanese_name(client):
    ListingFactory(name="スコッティ トイレットペーパー 12ロール")
    ListingFactory(name="UCC ゴールドスペシャル コーヒー 1kg")
    response = client.get(reverse("home"), {"q": "トイレット"})
    assert response.status_code == 200
    names = [listing.name for listing in response.context["page"]]
    assert names == ["スコッティ トイレットペーパー 12ロール"]


def test_search_folds_full_width_and_half_width_text(client):
    ListingFactory(name="サントリー BOSS 無糖ブラック")
    ListingFactory(name="キーコーヒー ドリップオン")
    assert [x.name for x in client.get("/", {"q": "ＢＯＳＳ"}).context["page"]] == [
        "サントリー BOSS 無糖ブラック"
    ]
    assert [x.name for x in client.get("/", {"q": "ｺｰﾋｰ"}).context["page"]] == [
        "キーコーヒー ドリップオン"
    ]
    assert [x.name for x in client.get("/", {"q": "boss 無糖"}).context["page"]] == [
        "サントリー BOSS 無糖ブラック"
    ]


def test_browse_by_category(client):
    ListingFactory(name="A", category="コーヒー")
    ListingFactory(name="B", category="洗剤")
    response = client.get("/", {"category": "洗剤"})
    assert [x.name for x in response.context["page"]] == ["B"]
    assert ("コーヒー", "Coffee") in response.context["categories"]


def test_home_is_paginated_and_bad_page_numbers_do_not_fail(client):
    ListingFactory.create_batch(45)
    assert len(client.get("/").context["page"]) == 20
    assert client.get("/", {"page": "3"}).context["page"].number == 3
    assert client.get("/", {"page": "999"}).status_code == 200
    assert client.get("/", {"page": "abc"}).status_code == 200


def test_cheap_right_now_lists_listings_near_their_low_biggest_drop_first():
    small = ListingFactory(name="small drop", price=950)
    big = ListingFactory(name="big drop", price=700)
    pricey = ListingFactory(name="not cheap", price=1100)
    for listing, current in ((small, 950), (big, 700), (pricey, 1100)):
        _history(listing, [1000] * 40 + [current])
    assert [x.name for x in cheap_now()] == ["big drop", "small drop"]


def test_listing_names_are_escaped(client):
    listing = ListingFactory(name='<script>alert("x")</script>洗剤')
    for url in ("/", f"/listings/{listing.pk}/", "/?q=洗剤"):
        body = client.get(url).content.decode()
        assert "<script>alert" not in body
        assert "&lt;script&gt;alert" in body


def test_listing_page_shows_the_svg_chart_with_its_text_alternative(client):
    listing = ListingFactory(price=880)
    _history(listing, [1000] * 20 + [None] * 3 + [900] * 20 + [880])
    body = client.get(f"/listings/{listing.pk}/").content.decode()
    assert '<svg viewBox="0 0 420 230" role="img"' in body
    assert 'class="price-line" d="M' in body
    assert 'class="stockout"' in body
    assert 'class="mark-low"' in body and 'class="mark-typical"' in body
    assert "<table" in body, "a table for screen readers"


def test_unknown_listing_is_404(client):
    assert client.get("/listings/999999/").status_code == 404


@pytest.mark.parametrize("listing_id", [2**63, 2**64, 10**30])
def test_a_listing_id_beyond_any_row_is_404_not_500(client, listing_id):
    # A visitor without a device gets the cached page path, which reads the listing by a
    # written-out query: an id past the integer column's range must not reach it.
    assert client.get(f"/listings/{listing_id}/").status_code == 404
    assert client.post(f"/listings/{listing_id}/", {"trigger": "lowest"}).status_code == 404


def test_home_query_count_does_not_grow_with_rows(client, django_assert_max_num_queries):
    for listing in ListingFactory.create_batch(50, price=700):
        PricePoint.objects.create(
            listing=listing, observed_at=NOW, price=700, shipping=0, in_stock=True
        )
    refresh_stats([], NOW)
    with django_assert_max_num_queries(6):
        assert client.get("/").status_code == 200


def test_listing_page_query_count(client, django_assert_max_num_queries):
    listing = ListingFactory()
    _history(listing, [1000] * 90)
    with django_assert_max_num_queries(4):
        assert client.get(f"/listings/{listing.pk}/").status_code == 200


def test_chart_breaks_the_line_where_out_of_stock():
    points = [
        Point(NOW - dt.timedelta(days=10), 1000, True),
        Point(NOW - dt.timedelta(days=8), None, False),
        Point(NOW - dt.timedelta(days=5), 900, True),
    ]
    chart = price_chart(points, now=timezone.now(), low=900, typical=1000, target=950)
    assert chart.path.count("M") == 2, "a new segment starts after the stock-out"
    assert len(chart.stockouts) == 1
    assert {line.kind for line in chart.lines} == {"low", "typical", "target"}
    low_y = next(line.y for line in chart.lines if line.kind == "low")
    typical_y = next(line.y for line in chart.lines if line.kind == "typical")
    assert low_y > typical_y, "a lower price is drawn lower"


def test_chart_markup_draws_every_tick_band_line_and_week():
    points = [
        Point(NOW - dt.timedelta(days=20), 1000, True),
        Point(NOW - dt.timedelta(days=15), 980, True),
        Point(NOW - dt.timedelta(days=8), None, False),
        Point(NOW - dt.timedelta(days=5), 900, True),
    ]
    chart = price_chart(points, now=NOW, low=900, typical=1000, target=950)
    listing = ListingFactory.build(low_90=900, typical_price=1000)
    with translation.override("en"):
        html = render_to_string("watches/_price_chart.html", {"listing": listing, "chart": chart})
    assert html.count('<line class="grid"') == len(chart.yticks) > 0
    for tick in chart.yticks:
        assert f'dominant-baseline="middle">{tick.label}</text>' in html
    assert html.count('<rect class="stockout"') == 1
    assert "<title>Out of stock</title></rect>" in html
    assert all(f'<line class="mark-{kind}"' in html for kind in ("low", "typical", "target"))
    anchors = re.findall(r'text-anchor="(start|middle|end)">\d+/\d+</text>', html)
    assert anchors == ["start", "middle", "middle", "middle", "end"]
    rows = re.findall(r"<tr><td>(\d+/\d+)–(\d+/\d+)</td><td>([^<]*)</td><td>([^<]*)</td>", html)
    assert len(rows) == len(chart.weeks) == 3, "a row for each week with a point, newest first"
    assert rows[0][2:] == ("¥900", "¥900")
    assert rows[1][2:] == ("—", "—"), "a week only out of stock has no price"
    assert "<td>Sold out at times</td></tr>" in html


def test_chart_without_history_is_empty():
    assert price_chart([], now=NOW).empty
