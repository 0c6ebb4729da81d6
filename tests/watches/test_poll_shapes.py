"""The poll plan chooses its requests, not only its listings: one item, a shop's feed (its
items most recently updated first) or a product's offers at every shop — each valued by what
it is likely to answer against the one request it costs — and what a shop's feed teaches is
kept for the next plan (`watches.polling.feeds`)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from tests.factories import DeviceFactory, ListingFactory, WatchFactory
from watches.marketplaces.base import Ask, FetchError, FetchKind, Observation, Page, Shape
from watches.models import FeedCheck, Listing, Product, ShopFeed, Trigger
from watches.polling import feeds
from watches.polling.observations import observe
from watches.polling.plan import Reach, plan
from watches.polling.poll import due_listings, poll

pytestmark = pytest.mark.django_db

TOKYO = zoneinfo.ZoneInfo("Asia/Tokyo")
T0 = dt.datetime(2026, 3, 10, 10, 0, tzinfo=TOKYO)
HOUR_AGO = T0 - dt.timedelta(hours=1)
EVERYTHING = frozenset({Shape.ITEM, Shape.SHOP, Shape.PRODUCT})


def reach(budget: int | None, shapes=EVERYTHING) -> dict[str, Reach]:
    return {"rakuten": Reach(budget, shapes, 30, lambda code: code.partition(":")[0])}


@pytest.fixture
def clock(time_machine):
    time_machine.move_to(T0, tick=False)
    return time_machine


def listing(code: str, *, price: int = 1000, target: int | None = None, **fields) -> Listing:
    fields.setdefault("last_polled_at", HOUR_AGO)
    made = ListingFactory.create(
        source="rakuten", item_code=code, price=price, shipping=0, units_per_pack=None, **fields
    )
    if target is not None:
        WatchFactory(
            listing=made, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=target
        )
    return made


def read_completely_since(since: dt.datetime) -> ShopFeed:
    """Shop "read"'s feed, read 5 minutes ago, every change shown since `since` (a quiet
    shop: 6 changes an hour, none of them a listing of ours)."""
    return ShopFeed.objects.create(
        source="rakuten",
        shop="read",
        read_at=T0 - dt.timedelta(minutes=5),
        complete_since=since,
        updates_per_hour=6.0,
        top=["read:other"],
    )


def shapes_of(chosen) -> list[tuple[Shape, str | int | None]]:
    return [
        (item.shape, item.listing_id if item.shape == Shape.ITEM else item.key) for item in chosen
    ]


def test_one_request_for_a_products_offers_goes_before_one_of_them_alone(clock):
    product = Product.objects.create(jan="4901750404406", name="Scottie")
    offers = [
        listing(f"shop{n}:scottie", target=990, product_id=product.pk, jan=product.jan)
        for n in range(3)
    ]
    lone = listing("other:coffee", target=990)

    chosen = plan(due_listings(T0), T0, reaches=reach(1, frozenset({Shape.ITEM, Shape.PRODUCT})))

    assert shapes_of(chosen) == [(Shape.PRODUCT, product.jan)]
    assert set(chosen[0].covers) == {offer.pk for offer in offers}
    assert lone.pk not in chosen[0].covers


def test_an_offer_its_products_page_did_not_reach_is_asked_for_alone(clock):
    """A product with more offers than one page holds: the page (cheapest first) answers the
    cheaper ones; the pricier one it did not reach would never be answered by asking the
    product again."""
    product = Product.objects.create(jan="4901750404406", name="Scottie")
    cheap = [
        listing(f"shop{n}:scottie", target=990, product_id=product.pk, jan=product.jan)
        for n in range(2)
    ]
    dear = listing(
        "dear:scottie",
        price=2000,
        target=1990,
        product_id=product.pk,
        jan=product.jan,
        beyond_product_page=True,
        last_polled_at=T0 - dt.timedelta(hours=3),
    )

    chosen = plan(due_listings(T0), T0, reaches=reach(2, frozenset({Shape.ITEM, Shape.PRODUCT})))

    assert sorted(shapes_of(chosen), key=str) == sorted(
        [(Shape.ITEM, dear.pk), (Shape.PRODUCT, product.jan)], key=str
    )
    [by_product] = [item for item in chosen if item.shape == Shape.PRODUCT]
    assert set(by_product.covers) == {offer.pk for offer in cheap}


def test_a_shop_with_many_watched_listings_is_read_as_a_feed(clock):
    crowded = [listing(f"big:item{n}", target=995) for n in range(6)]
    lone = listing("small:item", target=995)

    chosen = plan(due_listings(T0), T0, reaches=reach(2))

    assert chosen[0].shape == Shape.SHOP and chosen[0].key == "big"
    # The other request goes to the listing the feed does not answer.
    assert shapes_of(chosen)[1] == (Shape.ITEM, lone.pk)
    assert {pk for pk in chosen[0].covers} <= {item.pk for item in crowded}


def test_only_items_when_the_plan_of_one_request_an_item_is_asked(clock):
    for n in range(6):
        listing(f"big:item{n}", target=995)

    chosen = plan(due_listings(T0), T0, reaches=reach(3, frozenset({Shape.ITEM})))

    assert [item.shape for item in chosen] == [Shape.ITEM] * 3


def test_a_listing_whose_shop_feed_showed_every_change_since_waits_for_the_others(clock):
    # Both equally close and equally long unchecked; the feed of shop "read" showed every
    # change since before the first was observed, and it was not among them.
    covered = listing("read:item", target=995)
    other = listing("unread:item", target=995)
    read_completely_since(HOUR_AGO - dt.timedelta(minutes=1))

    chosen = plan(due_listings(T0), T0, reaches=reach(1))

    assert shapes_of(chosen) == [(Shape.ITEM, other.pk)]
    assert covered.pk < other.pk, "given first (least recently polled order), yet waits"


def test_a_complete_feed_does_not_answer_listings_observed_before_its_chain_began(clock):
    # The feed has shown every change for 30 minutes and will again, but these were last
    # observed an hour ago: a change before the chain began is on no page.
    crowded = [listing(f"read:item{n}", target=995) for n in range(4)]
    read_completely_since(T0 - dt.timedelta(minutes=30))

    chosen = plan(due_listings(T0), T0, reaches=reach(1))

    assert [item.shape for item in chosen] == [Shape.ITEM]
    assert chosen[0].listing_id in {item.pk for item in crowded}


def test_a_busy_shops_page_is_worth_the_few_watched_listings_it_shows(clock):
    # 60 watched listings in a shop whose page overflows (600 changes an hour, read 10
    # minutes ago, none of its listings on the last page): a page shows one or two of
    # them, not 30 % of them all.
    for n in range(60):
        listing(f"busy:item{n}", target=900)
    ShopFeed.objects.create(
        source="rakuten",
        shop="busy",
        read_at=T0 - dt.timedelta(minutes=10),
        complete_since=T0 - dt.timedelta(minutes=10),
        updates_per_hour=600.0,
        top=[f"busy:other{n}" for n in range(30)],
    )
    near = listing("quiet:item", target=995)

    chosen = plan(due_listings(T0), T0, reaches=reach(1))

    assert shapes_of(chosen) == [(Shape.ITEM, near.pk)]


def test_a_listing_many_watch_near_their_line_goes_before_a_product_of_lone_watches(clock):
    product = Product.objects.create(jan="4901750404406", name="Scottie")
    for n in range(3):
        listing(f"shop{n}:scottie", target=990, product_id=product.pk, jan=product.jan)
    crowded = listing("other:coffee", target=990)
    for _ in range(99):
        WatchFactory(
            listing=crowded, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=990
        )

    chosen = plan(due_listings(T0), T0, reaches=reach(1, frozenset({Shape.ITEM, Shape.PRODUCT})))

    assert shapes_of(chosen) == [(Shape.ITEM, crowded.pk)]


def test_a_products_offers_add_up_as_the_delays_they_clear_not_as_their_scores(clock):
    # Six offers of lone watches, each a sixteenth as watched as the crowded listing and as
    # close: their scores sum past the crowd's, the root of their squares does not.
    product = Product.objects.create(jan="4901750404406", name="Scottie")
    offers = [
        listing(f"shop{n}:scottie", target=990, product_id=product.pk, jan=product.jan)
        for n in range(6)
    ]
    crowded = listing("other:coffee", target=990)
    for _ in range(15):
        WatchFactory(
            listing=crowded, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=990
        )
    scores = {
        item.listing_id: item.score
        for item in plan(due_listings(T0), T0, reaches=reach(None, frozenset({Shape.ITEM})))
    }
    assert sum(scores[offer.pk] for offer in offers) > scores[crowded.pk]

    chosen = plan(due_listings(T0), T0, reaches=reach(2, frozenset({Shape.ITEM, Shape.PRODUCT})))

    assert shapes_of(chosen) == [(Shape.ITEM, crowded.pk), (Shape.PRODUCT, product.jan)]


def test_the_longest_unchecked_listing_asks_with_the_request_that_answers_most_of_what_is_due(
    clock,
):
    # Budget 4: a quarter (1) to the listing checked longest ago. Its product's page
    # answers it and its two other offers, all far from their lines, for that one request.
    product = Product.objects.create(jan="4901750404406", name="Scottie")
    offers = [
        listing(
            f"shop{n}:scottie",
            target=300,
            product_id=product.pk,
            jan=product.jan,
            last_polled_at=T0 - dt.timedelta(hours=3 + n),
        )
        for n in range(3)
    ]
    close = [
        listing(f"near{n}:item", target=995, last_polled_at=T0 - dt.timedelta(minutes=20))
        for n in range(4)
    ]
    products = frozenset({Shape.ITEM, Shape.PRODUCT})

    chosen = plan(due_listings(T0), T0, reaches=reach(4, products))

    asked = shapes_of(chosen)
    assert (Shape.PRODUCT, product.jan) in asked
    [by_product] = [item for item in chosen if item.shape == Shape.PRODUCT]
    assert set(by_product.covers) == {offer.pk for offer in offers}
    assert {item.listing_id for item in chosen if item.shape == Shape.ITEM} < {
        item.pk for item in close
    }
    # One item a request: the quarter answers the oldest offer alone.
    items_only = plan(due_listings(T0), T0, reaches=reach(4, frozenset({Shape.ITEM})))
    assert (Shape.ITEM, offers[2].pk) in shapes_of(items_only)
    assert not {offers[0].pk, offers[1].pk} & {item.listing_id for item in items_only}


def test_a_listing_a_complete_feed_showed_unchanged_is_not_the_longest_unchecked(clock):
    # Polled 3 h ago, but its shop's feed has shown every change since 4 h ago, up to 5
    # minutes ago, and not this listing: the quarter goes to the one polled 2 h ago.
    shown = listing("read:item", target=300, last_polled_at=T0 - dt.timedelta(hours=3))
    read_completely_since(T0 - dt.timedelta(hours=4))
    unknown = listing("unread:item", target=300, last_polled_at=T0 - dt.timedelta(hours=2))
    for n in range(4):
        listing(f"near{n}:item", target=995, last_polled_at=T0 - dt.timedelta(minutes=20))

    chosen = plan(due_listings(T0), T0, reaches=reach(4))

    asked = [item.listing_id for item in chosen]
    assert unknown.pk in asked and shown.pk not in asked


def test_feeds_are_trusted_until_item_requests_contradict_them(clock):
    assert feeds.trusted("rakuten")
    FeedCheck.objects.create(source="rakuten", confirmed=10, contradicted=10)
    assert not feeds.trusted("rakuten")
    FeedCheck.objects.filter(source="rakuten").update(confirmed=90)
    assert feeds.trusted("rakuten")


# --- what a feed teaches ---------------------------------------------------------------------


def page(codes: list[str], at: dt.datetime, shop: str = "s") -> Page:
    items = tuple(Observation(code, 100, True, at, extra={"shop": shop}) for code in codes)
    return Page(Ask(Shape.SHOP, shop), items, at)


def test_a_read_that_reaches_back_to_the_last_learns_the_pace_and_keeps_the_chain():
    feed = ShopFeed(source="rakuten", shop="s")
    first = T0 - dt.timedelta(hours=1)
    feeds._learn_from(feed, page([f"s:{n}" for n in range(30)], first), 30)
    assert feed.complete_since == first and feed.updates_per_hour is None

    # Six items changed in the hour; then the old order resumes (s:0 followed by s:1).
    later = [f"s:new{n}" for n in range(6)] + [f"s:{n}" for n in range(24)]
    feeds._learn_from(feed, page(later, T0), 30)

    assert feed.updates_per_hour == pytest.approx(6.0)
    assert feed.complete_since == first, "every change since the first read was shown"
    assert feed.read_at == T0 and feed.top[:2] == ["s:new0", "s:new1"]


def test_a_read_that_does_not_reach_back_starts_the_chain_again():
    feed = ShopFeed(source="rakuten", shop="s")
    first = T0 - dt.timedelta(hours=1)
    feeds._learn_from(feed, page([f"s:{n}" for n in range(30)], first), 30)

    feeds._learn_from(feed, page([f"s:new{n}" for n in range(30)], T0), 30)

    assert feed.complete_since == T0, "changes beyond the page may have been missed"
    assert feed.updates_per_hour >= 30.0


def busy_shop_reads(pace: float, every: dt.timedelta, reads: int) -> list[Page]:
    """Page 1 of a shop whose items change `pace` an hour, read every `every`: each read's
    newest 30 items (a changed item goes to the top)."""
    changed, pages = 0.0, []
    for n in range(reads):
        at = T0 + n * every
        changed += pace * every.total_seconds() / 3600
        newest = round(changed)
        pages.append(page([f"s:c{k}" for k in range(newest, newest - 30, -1)], at))
    return pages


def test_a_busy_shops_learned_pace_rises_to_its_true_pace_within_a_few_reads():
    # 300 changes an hour, read every 10 minutes: 50 changes between reads, so no page
    # reaches back to the last one, and each only proves "at least 180 an hour".
    feed = ShopFeed(source="rakuten", shop="s")
    learned = []
    for read in busy_shop_reads(300, dt.timedelta(minutes=10), 5):
        feeds._learn_from(feed, read, 30)
        learned.append(feed.updates_per_hour)

    assert learned[:2] == [None, pytest.approx(180.0)]
    # The floor said the next page would reach back; it did not: the belief doubles.
    assert learned[2] >= 300
    # Once the belief says pages overflow, more reads that overflow raise it no further.
    assert learned[4] == learned[2] <= 2 * 300


def test_a_shop_whose_pages_reach_back_keeps_its_measured_pace():
    feed = ShopFeed(source="rakuten", shop="s")
    for read in busy_shop_reads(60, dt.timedelta(minutes=10), 5):
        feeds._learn_from(feed, read, 30)

    assert feed.updates_per_hour == pytest.approx(60.0)


def test_an_item_that_changed_again_alone_does_not_prove_the_order_resumes():
    feed = ShopFeed(source="rakuten", shop="s")
    first = T0 - dt.timedelta(hours=1)
    feeds._learn_from(feed, page([f"s:{n}" for n in range(30)], first), 30)

    # s:0 changed again (top), everything below is new: the old order does not resume.
    feeds._learn_from(feed, page(["s:0"] + [f"s:new{n}" for n in range(29)], T0), 30)

    assert feed.complete_since == T0


def test_a_shop_that_fits_on_one_page_is_always_seen_whole():
    feed = ShopFeed(source="rakuten", shop="s")
    feeds._learn_from(feed, page(["s:a", "s:b"], T0 - dt.timedelta(hours=1)), 30)
    feeds._learn_from(feed, page(["s:b", "s:a"], T0), 30)
    assert feed.complete_since == T0 - dt.timedelta(hours=1)


def test_a_page_error_is_kept_on_the_feed_and_teaches_nothing(clock):
    feeds.learn("rakuten", {"s": page(["s:a"], T0 - dt.timedelta(hours=1))}, 30)
    feeds.learn("rakuten", {"s": FetchError(FetchKind.SERVER, "HTTP 503")}, 30)
    feed = ShopFeed.objects.get(source="rakuten", shop="s")
    assert feed.last_error == "server: HTTP 503"
    assert feed.read_at == T0 - dt.timedelta(hours=1)


# --- the hypothesis, measured ------------------------------------------------------------------


def test_an_item_request_soon_after_a_feed_showed_the_item_confirms_or_contradicts_it(clock):
    said = listing(
        "s:said", price=900, seen_via=Shape.SHOP, last_polled_at=T0 - dt.timedelta(minutes=3)
    )
    wrong = listing(
        "s:wrong", price=900, seen_via=Shape.SHOP, last_polled_at=T0 - dt.timedelta(minutes=3)
    )
    old = listing(
        "s:old", price=900, seen_via=Shape.SHOP, last_polled_at=T0 - dt.timedelta(hours=2)
    )
    same = Observation("s:said", 900, True, T0, shipping=0)
    moved = Observation("s:wrong", 800, True, T0, shipping=0)
    later = Observation("s:old", 800, True, T0, shipping=0)

    observe([(said, same), (wrong, moved), (old, later)], T0).save()

    check = FeedCheck.objects.get(source="rakuten")
    assert (check.confirmed, check.contradicted) == (1, 1), "too late to say for s:old"
    assert set(Listing.objects.values_list("seen_via", flat=True)) == {Shape.ITEM}


def test_an_item_request_soon_after_a_complete_read_that_did_not_show_it_checks_it_unchanged(
    clock, ichiba
):
    """What the plan stakes on the feeds: a complete read that does not show a listing says
    it has not changed (a price change moves an item up its shop's feed — undocumented). An
    item's own answer minutes later checks exactly that; a change it finds is the failure
    that would otherwise go unseen, since nothing was shown to compare."""
    for shop, minutes in (("s", 3), ("u", 30)):
        ShopFeed.objects.create(
            source="rakuten",
            shop=shop,
            read_at=T0 - dt.timedelta(minutes=minutes),
            complete_since=T0 - dt.timedelta(hours=3),
            updates_per_hour=6.0,
            top=[f"{shop}:other"],
        )
    still = listing("s:still", price=900)
    moved = listing("s:moved", price=900)
    before_the_chain = listing("s:older", price=900, last_polled_at=T0 - dt.timedelta(hours=4))
    stale_read = listing("u:item", price=900)
    no_feed = listing("t:item", price=900)
    answers = [
        (still, Observation("s:still", 900, True, T0, shipping=0)),
        (moved, Observation("s:moved", 800, True, T0, shipping=0)),
        (before_the_chain, Observation("s:older", 800, True, T0, shipping=0)),
        (stale_read, Observation("u:item", 800, True, T0, shipping=0)),
        (no_feed, Observation("t:item", 800, True, T0, shipping=0)),
    ]

    observe(answers, T0).save()

    check = FeedCheck.objects.get(source="rakuten")
    assert (check.confirmed, check.contradicted) == (1, 1)


def test_a_feed_answer_is_no_check_of_a_feed_answer(clock):
    shown = listing(
        "s:a", price=900, seen_via=Shape.SHOP, last_polled_at=T0 - dt.timedelta(minutes=1)
    )
    observe([(shown, Observation("s:a", 800, True, T0, shipping=0))], T0, via=Shape.SHOP).save()
    assert not FeedCheck.objects.exists()
    shown.refresh_from_db()
    assert shown.seen_via == Shape.SHOP and shown.price == 800


# --- through the real adapter, against the fake Ichiba --------------------------------------


def shop_requests(ichiba) -> list[tuple[str, str]]:
    return [(q["shopCode"], q.get("page", "1")) for q in ichiba.requests if "shopCode" in q]


def item_requests(ichiba) -> list[str]:
    return [q["itemCode"] for q in ichiba.requests if "itemCode" in q]


def one_id_at_one_a_second(settings) -> None:
    """Rakuten's one application id at 1 request/s, its waits costing no time."""
    from tests.fakes.clock import FakeClock
    from tests.fakes.ichiba import APP_ID
    from watches.marketplaces.ratelimit import RateLimiter, install_limiter

    settings.RAKUTEN_RATE_PER_SECOND = 1.0
    fake = FakeClock()
    install_limiter(f"rakuten:{APP_ID}", 1.0, RateLimiter(1.0, clock=fake, sleep=fake.sleep))


def batches_of_a_cycle() -> list[list[int]]:
    """Run one dispatch cycle; the row ids of each batch it processed, in order."""
    from unittest import mock

    from outbox import dispatch

    batches: list[list[int]] = []
    process = dispatch._process_batch

    def spy(cycle, ids):
        batches.append(list(ids))
        return process(cycle, ids)

    with mock.patch.object(dispatch, "_process_batch", spy):
        dispatch.run_cycle()
    return batches


def test_a_feed_read_observes_the_known_items_on_it_and_stores_no_other(clock, ichiba):
    from tests.factories import DeviceFactory, WatchFactory
    from watches.polling.feeds import poll_shops

    for n in range(40):
        ichiba.add(f"big:unknown{n}", price=500)
    watched = [listing(f"big:item{n}", price=1000) for n in range(3)]
    for item in watched:
        ichiba.add(item.item_code, price=1000)
        WatchFactory(listing=item, device=DeviceFactory(), target_price=950)
    ichiba.set("big:item1", price=900)  # on sale: to the top of the shop's feed

    result = poll_shops("rakuten", ["big"])

    assert shop_requests(ichiba) == [("big", "1")] and not item_requests(ichiba)
    sale = Listing.objects.get(item_code="big:item1")
    assert (sale.price, sale.seen_via) == (900, Shape.SHOP)
    assert result.enqueued == 1, "the sale crosses the watch's line: told, as polling tells"
    assert not Listing.objects.filter(item_code__startswith="big:unknown").exists()
    feed = ShopFeed.objects.get(source="rakuten", shop="big")
    assert feed.read_at == T0 and feed.top[0] == "big:item1" and len(feed.top) == 30


def test_a_polling_run_reads_a_crowded_shops_feed_and_asks_a_lone_listing_alone(
    clock, ichiba, settings
):
    settings.RAKUTEN_RATE_PER_SECOND = 1.0
    settings.POLL_MAX_SECONDS = 8  # 8 requests at 1/s…
    settings.POLL_REFETCH_SHARE = 0.75  # …a quarter of them for polling: 2
    for n in range(5):
        made = listing(f"big:item{n}", target=995)
        ichiba.add(made.item_code, price=1000)
    lone = listing("small:item", target=995)
    ichiba.add(lone.item_code, price=1000)

    poll()

    assert shop_requests(ichiba) == [("big", "1")]
    assert item_requests(ichiba) == ["small:item"]


def test_a_run_asks_in_order_of_worth_whatever_the_shape(clock, ichiba, settings):
    # A crowd near its line, then a product of two lone watches, then one lone watch: asked
    # in that order, each batch judged before the next is asked (not every item first).
    settings.RAKUTEN_RATE_PER_SECOND = 4.0
    settings.POLL_MAX_SECONDS = 3  # 12 requests at 4/s…
    settings.POLL_REFETCH_SHARE = 0.75  # …a quarter of them for polling: 3
    crowd = listing("crowd:item", target=995)
    for _ in range(3):
        WatchFactory(
            listing=crowd, device=DeviceFactory(), trigger=Trigger.TARGET_PRICE, target_price=995
        )
    product = Product.objects.create(jan="4901750404406", name="Scottie")
    for n in range(2):
        made = listing(f"shop{n}:scottie", target=995, product_id=product.pk, jan=product.jan)
        ichiba.add(made.item_code, price=1000, jan=product.jan)
    lone = listing("lone:item", target=990)
    for made in (crowd, lone):
        ichiba.add(made.item_code, price=1000)

    poll()

    asked = [q.get("itemCode") or q.get("keyword") for q in ichiba.requests]
    assert asked == ["crowd:item", product.jan, "lone:item"]


def test_the_recheck_of_rows_that_share_a_shop_asks_its_feed_once(clock, ichiba, recording_channel):
    from outbox.dispatch import run_cycle
    from outbox.enqueue import Detection, enqueue_many
    from outbox.models import Outbox, Status

    device = DeviceFactory()
    detections = []
    for code in ("s:a", "s:b", "s:c", "alone:x"):
        ichiba.add(code, price=900)
        made = listing(code, price=900)
        watch = WatchFactory(listing=made, device=device, target_price=950)
        detections.append(Detection.for_watch(watch, T0, {"line": "950", "price": 900}))
    for n in range(10):
        ichiba.add(f"s:other{n}", price=100)
    ichiba.set("s:b", price=880)  # moved since detection, still below the line
    enqueue_many(detections)

    run_cycle()

    assert shop_requests(ichiba) == [("s", "1")]
    assert item_requests(ichiba) == ["alone:x"]
    assert Outbox.objects.filter(status=Status.SENT).count() == 4
    assert Listing.objects.get(item_code="s:b").price == 880, "the fresh price, from the feed"


def test_the_recheck_of_rows_on_offers_of_one_product_asks_its_page_of_offers_once(
    clock, ichiba, recording_channel
):
    """Listing watches on three shops' offers of one product: one request for the product's
    offers answers them; an offer sold out (not on a page of offers in stock) and a listing
    of no product are asked for alone."""
    from outbox.dispatch import run_cycle
    from outbox.enqueue import Detection, enqueue_many
    from outbox.models import Outbox, Status

    jan = "4901750404406"
    product = Product.objects.create(jan=jan, name="Scottie")
    device = DeviceFactory()
    detections = []
    for code in ("a:tp", "b:tp", "c:tp", "d:tp"):
        ichiba.add(code, price=900, jan=jan)
    ichiba.add("alone:x", price=900)
    for code in ("a:tp", "b:tp", "c:tp", "d:tp", "alone:x"):
        fields = {"product_id": product.pk, "jan": jan} if code != "alone:x" else {}
        made = listing(code, price=900, **fields)
        watch = WatchFactory(listing=made, device=device, target_price=950)
        detections.append(Detection.for_watch(watch, T0, {"line": "950", "price": 900}))
    ichiba.set("b:tp", price=880)  # moved since detection, still below the line
    ichiba.set("d:tp", available=False)  # sold out: not among the offers in stock
    enqueue_many(detections)

    run_cycle()

    assert [q["keyword"] for q in ichiba.requests if "keyword" in q] == [jan]
    assert sorted(item_requests(ichiba)) == ["alone:x", "d:tp"]
    assert not shop_requests(ichiba)
    sent = Outbox.objects.filter(status=Status.SENT)
    assert sorted(sent.values_list("watch__listing__item_code", flat=True)) == [
        "a:tp",
        "alone:x",
        "b:tp",
        "c:tp",
    ]
    assert Listing.objects.get(item_code="b:tp").price == 880, "the fresh price, from the page"
    assert Listing.objects.get(item_code="b:tp").seen_via == Shape.PRODUCT


def test_the_recheck_asks_item_by_item_when_the_feeds_are_not_trusted(
    clock, ichiba, recording_channel
):
    from outbox.dispatch import run_cycle
    from outbox.enqueue import Detection, enqueue_many

    FeedCheck.objects.create(source="rakuten", confirmed=0, contradicted=50)
    device = DeviceFactory()
    detections = []
    for code in ("s:a", "s:b"):
        ichiba.add(code, price=900)
        watch = WatchFactory(listing=listing(code, price=900), device=device, target_price=950)
        detections.append(Detection.for_watch(watch, T0, {"line": "950", "price": 900}))
    enqueue_many(detections)

    run_cycle()

    assert not shop_requests(ichiba)
    assert sorted(item_requests(ichiba)) == ["s:a", "s:b"]


def test_the_recheck_reads_a_second_page_only_while_two_listings_are_missing(
    clock, ichiba, recording_channel
):
    from outbox.dispatch import run_cycle
    from outbox.enqueue import Detection, enqueue_many

    device = DeviceFactory()
    detections = []
    for code in ("s:a", "s:b", "s:c"):
        ichiba.add(code, price=900)
        watch = WatchFactory(listing=listing(code, price=900), device=device, target_price=950)
        detections.append(Detection.for_watch(watch, T0, {"line": "950", "price": 900}))
    for n in range(60):  # 60 later changes: the three are on page 3
        ichiba.add(f"s:other{n}", price=100)
    ichiba.set("s:a", price=890)  # back to the top
    enqueue_many(detections)

    run_cycle()

    assert shop_requests(ichiba) == [("s", "1"), ("s", "2"), ("s", "3")]
    assert not item_requests(ichiba), "b and c were on page 3"


def test_a_dispatch_batch_holds_what_the_budget_rechecks_while_the_first_answer_is_fresh(
    ichiba, settings
):
    from watches import services

    settings.RAKUTEN_RATE_PER_SECOND = 1.0
    # At 1 request a second, half of them the dispatcher's while polling takes the rest:
    # 15 re-checks within the 30 s a value may age before it is sent.
    assert services.recheck_capacity(dt.timedelta(seconds=30)) == 15
    settings.MARKETPLACE_ADAPTERS = {"demo": settings.MARKETPLACE_ADAPTERS["demo"]}
    assert services.recheck_capacity(dt.timedelta(seconds=30)) is None, "the demo: no budget"


def test_a_crowds_rows_fill_a_batch_past_what_the_budget_rechecks_one_listing_each(
    clock, ichiba, recording_channel, settings
):
    from outbox.enqueue import Detection, enqueue_many
    from outbox.models import Outbox, Status

    one_id_at_one_a_second(settings)  # 15 re-checks a batch (the test above)
    settings.POLL_SHAPES = ["item"]  # one request an item: each listing its own re-check
    FeedCheck.objects.create(source="rakuten", confirmed=0, contradicted=50)
    detections = []
    crowd = listing("crowd:item", price=900)
    ichiba.add(crowd.item_code, price=900)
    for _ in range(40):  # a crowd's rows first, then 20 lone listings'
        watch = WatchFactory(listing=crowd, device=DeviceFactory(), target_price=950)
        detections.append(Detection.for_watch(watch, T0, {"line": "950", "price": 900}))
    for n in range(20):
        ichiba.add(f"lone{n}:item", price=900)
        watch = WatchFactory(listing=listing(f"lone{n}:item", price=900), target_price=950)
        detections.append(Detection.for_watch(watch, T0, {"line": "950", "price": 900}))
    enqueue_many(detections)

    batches = batches_of_a_cycle()

    assert Outbox.objects.filter(status=Status.SENT).count() == 60
    listings = dict(Outbox.objects.values_list("id", "watch__listing_id"))
    rechecked = [{listings[pk] for pk in batch} for batch in batches]
    assert all(len(asked) <= 15 for asked in rechecked), "never more re-checks than the budget"
    # The crowd's 40 rows and 14 lone listings in the first batch (15 re-checks), not 15 rows.
    assert [len(batch) for batch in batches] == [54, 6]
    assert item_requests(ichiba).count("crowd:item") == 1


def test_a_sales_rows_due_one_shop_after_another_go_out_a_shops_page_at_a_time(
    clock, ichiba, recording_channel, settings
):
    """Six shops' sale, the rows due one of each shop in turn, two re-checks a batch: the
    oldest rows bring their shops' later rows along (one feed page answers them), so three
    batches of two shops each, six pages — not fifteen batches of two rows from two shops,
    thirty item requests."""
    from outbox.enqueue import Detection, enqueue_many
    from outbox.models import Outbox, Status

    one_id_at_one_a_second(settings)
    settings.OUTBOX_REFETCH_MAX_AGE = 4  # half of 4 s at 1/s: two re-checks a batch
    shops = [f"shop{s}" for s in range(6)]
    made: dict[str, list] = {shop: [] for shop in shops}
    for shop in shops:
        for n in range(5):
            code = f"{shop}:sale{n}"
            ichiba.add(code, price=900)
            made[shop].append(listing(code, price=900))
    detections = [
        Detection.for_watch(
            WatchFactory(listing=made[shop][n], device=DeviceFactory(), target_price=950),
            T0,
            {"line": "950", "price": 900},
        )
        for n in range(5)
        for shop in shops
    ]
    enqueue_many(detections)
    batches = batches_of_a_cycle()

    assert Outbox.objects.filter(status=Status.SENT).count() == 30
    shop_of = dict(Outbox.objects.values_list("id", "watch__listing__item_code"))
    assert [sorted({shop_of[pk].partition(":")[0] for pk in b}) for b in batches] == [
        ["shop0", "shop1"],
        ["shop2", "shop3"],
        ["shop4", "shop5"],
    ]
    assert sorted(shop_requests(ichiba)) == [(shop, "1") for shop in shops]
    assert not item_requests(ichiba)


def test_rows_on_offers_of_products_due_one_product_after_another_go_out_a_page_at_a_time(
    clock, ichiba, recording_channel, settings
):
    """Four products' offers, five shops each, their rows due one of each product in turn,
    two re-checks a batch: a batch counts a product's offers as one re-check (one page of
    its offers answers them), so the oldest rows bring their products' later rows along —
    two batches, four pages of offers — not ten batches of two rows on two products, each
    asked for alone (twenty item requests)."""
    from outbox.enqueue import Detection, enqueue_many
    from outbox.models import Outbox, Status

    one_id_at_one_a_second(settings)
    settings.OUTBOX_REFETCH_MAX_AGE = 4  # half of 4 s at 1/s: two re-checks a batch
    jans = [f"490175040440{p}" for p in range(4)]
    made: dict[str, list] = {jan: [] for jan in jans}
    for jan in jans:
        product = Product.objects.create(jan=jan, name=f"product {jan}")
        for n in range(5):
            code = f"shop{n}:{jan}"
            ichiba.add(code, price=900, jan=jan)
            made[jan].append(listing(code, price=900, product_id=product.pk, jan=jan))
    detections = [
        Detection.for_watch(
            WatchFactory(listing=made[jan][n], device=DeviceFactory(), target_price=950),
            T0,
            {"line": "950", "price": 900},
        )
        for n in range(5)
        for jan in jans
    ]
    enqueue_many(detections)
    batches = batches_of_a_cycle()

    assert Outbox.objects.filter(status=Status.SENT).count() == 20
    jan_of = dict(Outbox.objects.values_list("id", "watch__listing__jan"))
    assert [sorted({jan_of[pk] for pk in b}) for b in batches] == [jans[:2], jans[2:]]
    assert sorted(q["keyword"] for q in ichiba.requests if "keyword" in q) == jans
    assert not item_requests(ichiba)
    assert not shop_requests(ichiba)


def test_a_products_offers_answer_their_own_listing_watches_too(clock, yahoo):
    from watches.products.polling import poll_product_batch

    product = Product.objects.create(jan="4901750404406", name="Scottie")
    offers = []
    for n in range(2):
        code = f"store{n}_tp-12r"
        yahoo.add(code, jan=product.jan, price=1000, name="スコッティ 12ロール")
        offers.append(
            ListingFactory(
                source="yahoo", item_code=code, price=1000, product_id=product.pk, jan=product.jan
            )
        )
    WatchFactory(listing=offers[1], device=DeviceFactory(), target_price=950)
    yahoo.set("store1_tp-12r", price=900)

    result = poll_product_batch("yahoo", [product.pk])

    assert result.enqueued == 1, "the offer's own watch, told from its product's answer"
