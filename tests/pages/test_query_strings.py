"""Every GET parameter of every URL, hostile: a NUL, a lone surrogate, 10,000 characters, a
repeated name and digits of other scripts. Each answer is a 4xx with a message a person can
read, or an ordinary answer — never a 5xx — on whichever database the suite runs (run it with
DATABASE_URL=postgres://… for PostgreSQL). The URLs come from the URL conf itself, so a new
page is swept the day it lands; the names are every one the views, templates and admin filters
read, and one made up."""

from __future__ import annotations

import datetime as dt
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.options import IS_FACETS_VAR, IS_POPUP_VAR, TO_FIELD_VAR
from django.contrib.admin.views.main import ALL_VAR, ERROR_FLAG, ORDER_VAR, PAGE_VAR, SEARCH_VAR
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from django_q.models import OrmQ, Schedule, Task

from tests.factories import (
    DispatchRunFactory,
    ListingFactory,
    OutboxEventFactory,
    OutboxFactory,
    WatchFactory,
    device_with_cookie,
    with_history,
)
from watches import devices, email_address
from watches.models import Listing, Product

pytestmark = pytest.mark.django_db

NUL = "%00"
SURROGATE = "%ED%A0%80"  # U+D800 as UTF-8 would spell it: no valid text has it
LONG = "a" * 10_000
HUGE = "9" * 30  # beyond any integer column, SQLite's and PostgreSQL's
# "１２²", full-width digits and a superscript: `str.isdigit()` is true, `int()` raises.
OTHER_DIGITS = "%EF%BC%91%EF%BC%92%C2%B2"
# Every name a view, a template's link or form, or Django's admin reads from a query string
# (grep request.GET and "?" in watches/, outbox/, templates/), besides each admin list filter's
# own (`filter_names`).
PAGE_NAMES = ("q", "category", "page", "removed", "next", "language")
ADMIN_NAMES = (
    SEARCH_VAR,
    ORDER_VAR,
    PAGE_VAR,
    ALL_VAR,
    ERROR_FLAG,
    IS_POPUP_VAR,
    TO_FIELD_VAR,
    IS_FACETS_VAR,
    "_changelist_filters",
    # the autocomplete view's
    "term",
    "app_label",
    "model_name",
    "field_name",
)
MADE_UP = f"x{secrets.token_hex(4)}"
REFUSED = {
    NUL: (400, "null character"),
    SURROGATE: (400, "not valid text"),
    LONG: (414, "too long"),
}


@dataclass(frozen=True)
class Route:
    """One URL pattern: its full route, as the URL conf writes it, and its name."""

    route: str
    name: str

    def __str__(self) -> str:
        return f"{self.name or '(unnamed)'} /{self.route}"


def routes(patterns=None, prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from routes(entry.url_patterns, prefix + str(entry.pattern), inner)
        elif isinstance(entry, URLPattern):
            yield Route(prefix + str(entry.pattern), f"{namespace}{entry.name or ''}")


ALL_ROUTES = list(routes())


@dataclass
class World:
    """One of everything a URL can name, owned by the sweeping client's device."""

    client: Client
    staff: User
    values: dict[str, str]
    admin_objects: dict[str, str]
    tokens: dict[str, str]  # by URL name, for the routes that take a token
    removed: int  # a removed watch's id

    def urls(self, route: Route) -> list[str]:
        """The route made concrete with this world's objects (several for the admin's list of
        one app's models)."""
        if route.route.startswith("admin/^"):
            labels = {model._meta.app_label for model in registered_models()}
            return [f"/admin/{label}/" for label in sorted(labels)]
        if route.route == "admin/(?P<url>.*)$":
            return ["/admin/no-such-page/"]
        path = route.route
        model = re.match(r"admin/(\w+)/(\w+)/<path:object_id>/", path)
        if model:
            path = path.replace("<path:object_id>", self.admin_objects[model.expand(r"\1.\2")])
        for key, value in self.values.items():
            path = re.sub(rf"<(\w+:)?{key}>", value, path)
        assert "<" not in path, f"no object for {route}: add one to the world"
        return ["/" + path]


def registered_models() -> list[type[Model]]:
    return [model for model in apps.get_models() if admin.site.is_registered(model)]


def filter_names(staff: User) -> set[str]:
    """The query names every registered admin's list filters read."""
    request = RequestFactory().get("/admin/")
    request.user = staff
    names: set[str] = set()
    for model in registered_models():
        changelist = admin.site.get_model_admin(model).get_changelist_instance(request)
        for spec in changelist.filter_specs:
            names.update(name for name in spec.expected_parameters() if name is not None)
    return names


@pytest.fixture
def world(client) -> World:
    now = timezone.now()
    staff = User.objects.create_superuser("staff", "staff@example.com", "pw")
    client.force_login(staff)
    device, _ = device_with_cookie(client, email="person@mail.example", email_confirmed_at=now)
    listing = with_history(ListingFactory.create(), [1000, None, 900], now=now)
    product = Product.objects.create(jan="4901234567894", name="Tissue")
    ListingFactory(product=product, jan=product.jan)
    watch = WatchFactory.create(device=device, listing=listing)
    removed = WatchFactory.create(device=device, listing=ListingFactory(), removed_at=now)
    row = OutboxFactory.create(watch=watch, status="sent", sent_at=now)
    OutboxEventFactory(outbox=row)
    run = DispatchRunFactory.create()
    schedule = Schedule.objects.create(func="math.floor", name="sweep")
    task = Task.objects.create(
        id=secrets.token_hex(16),
        name="sweep",
        func="math.floor",
        started=now - dt.timedelta(seconds=1),
        stopped=now,
        success=True,
    )
    failure = Task.objects.create(
        id=secrets.token_hex(16),
        name="sweep-failed",
        func="math.floor",
        started=now - dt.timedelta(seconds=1),
        stopped=now,
        success=False,
    )
    queued = OrmQ.objects.create(key="default", payload="x", lock=now)
    group = Group.objects.create(name="sweepers")
    from demo.models import DemoProduct
    from watches.models import FeedCheck, ShopFeed

    feed = ShopFeed.objects.create(source="rakuten", shop="sweep", read_at=now, top=["sweep:a"])
    check = FeedCheck.objects.create(source="rakuten", confirmed=3, contradicted=1)
    objects = {
        "auth.group": group.pk,
        "auth.user": staff.pk,
        "django_q.schedule": schedule.pk,
        "django_q.success": task.pk,
        "django_q.failure": failure.pk,
        "django_q.ormq": queued.pk,
        "watches.listing": listing.pk,
        "watches.watch": watch.pk,
        "watches.device": device.pk,
        "watches.product": product.pk,
        "watches.shopfeed": feed.pk,
        "watches.feedcheck": check.pk,
        "outbox.outbox": row.pk,
        "outbox.dispatchrun": run.pk,
        "demo.demoproduct": DemoProduct.objects.get(item_code=listing.item_code).pk,
    }
    values = {
        "listing_id": listing.pk,
        "product_id": product.pk,
        "watch_id": watch.pk,
        "row_id": row.pk,
        "id": staff.pk,
        "content_type_id": ContentType.objects.get_for_model(Listing).pk,
        "object_id": listing.pk,
    }
    return World(
        client=client,
        staff=staff,
        values={key: str(value) for key, value in values.items()},
        admin_objects={key: str(value) for key, value in objects.items()},
        tokens={
            "email-confirm": email_address.confirm_token(device),
            "email-unsubscribe": email_address.unsubscribe_token(device.pk, device.email),
            "device-transfer": devices.create_transfer_link(device),
        },
        removed=removed.pk,
    )


def concrete(world: World, route: Route) -> list[str]:
    if "<str:token>" in route.route:
        token = world.tokens[route.name]
        return ["/" + route.route.replace("<str:token>", token)]
    return world.urls(route)


def get(client: Client, url: str, query: str):
    client.raise_request_exception = False
    return client.get(f"{url}?{query}", headers={"accept-language": "en"})


def refused(response, value: str) -> bool:
    status, words = REFUSED[value]
    return response.status_code == status and words in response.content.decode()


def names_read_by(route: Route, staff: User) -> list[str]:
    """Every name for a list page of the admin, whose filters read names of their own;
    everywhere else the names the pages, Django's admin and nobody use."""
    names = {*PAGE_NAMES, *ADMIN_NAMES, MADE_UP}
    if route.name.endswith("_changelist"):
        names |= filter_names(staff)
    return sorted(names)


def test_every_url_pattern_is_swept():
    """The sweep's list is the URL conf's: no page can be left out by forgetting it."""
    assert len(ALL_ROUTES) > 100
    assert {"home", "listing", "history", "admin:outbox_outbox_changelist"} <= {
        r.name for r in ALL_ROUTES
    }


@pytest.mark.parametrize("route", ALL_ROUTES, ids=str)
def test_no_url_answers_a_5xx_to_any_hostile_query(world, route):
    """Each hostile value under every name at once is refused with its message; each name
    repeated (an odd number and a number too large for any column, the last one winning)
    reaches the view, which answers it without a 5xx; so do digits of other scripts."""
    every_name = sorted({*PAGE_NAMES, *ADMIN_NAMES, *filter_names(world.staff), MADE_UP})
    failures = []
    for url in concrete(world, route):
        plain = get(world.client, url, f"removed={world.removed}")
        if plain.status_code >= 500:
            failures.append(f"{url} answered {plain.status_code} with no hostile parameter")
        for value in REFUSED:
            response = get(world.client, url, "&".join(f"{n}={value}" for n in every_name))
            if not refused(response, value):
                failures.append(f"{url}?…={value[:12]} → {response.status_code}")
        for name in names_read_by(route, world.staff):
            repeated = get(world.client, url, f"{name}=-1&{name}={HUGE}")
            if repeated.status_code >= 500:
                failures.append(f"{url}?{name}=-1&{name}={HUGE} → {repeated.status_code}")
            digits = get(world.client, url, f"{name}={OTHER_DIGITS}")
            if digits.status_code >= 500:
                failures.append(f"{url}?{name}=１２² → {digits.status_code}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("url", ["/", "/watches/", "/admin/outbox/outbox/"])
@pytest.mark.parametrize("value", list(REFUSED), ids=["nul", "surrogate", "long"])
def test_each_name_alone_is_refused_with_a_message(world, url, value):
    names = sorted({*PAGE_NAMES, *ADMIN_NAMES, *filter_names(world.staff), MADE_UP})
    assert [n for n in names if not refused(get(world.client, url, f"{n}={value}"), value)] == []


# --- The refusal itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "words"),
    [("en", "contains a null character"), ("ja", "ヌル文字が含まれています")],
)
def test_the_refusal_is_a_page_in_the_visitors_language(client, language, words):
    response = client.get("/?q=abc%00", headers={"accept-language": language})
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert words in body and 'href="/"' in body


def test_a_json_url_gets_the_refusal_as_json(client):
    response = client.get("/me/history.json?page=%ED%A0%80")
    assert response.status_code == 400
    assert response.json() == {
        "ok": False,
        "error": "This address contains characters that are not valid text (it is not UTF-8). "
        "Check the link, or search again from the search box.",
    }


def test_a_query_string_over_the_limit_is_414_and_one_at_it_is_read(client):
    from yasugoro.query_string import MAX_QUERY_BYTES

    at_limit = "q=" + "a" * (MAX_QUERY_BYTES - 2)
    assert client.get(f"/?{at_limit}").status_code == 200
    response = client.get(f"/?{at_limit}a")
    assert response.status_code == 414
    assert "more than 4,096 characters" in response.content.decode()


def test_percent_encoded_japanese_is_ordinary_text(client):
    listing = ListingFactory(name="トイレットペーパー 12ロール")
    response = client.get("/?q=%E3%83%88%E3%82%A4%E3%83%AC")  # トイレ
    assert response.status_code == 200
    assert listing.name in response.content.decode()


def test_a_repeated_search_takes_the_last_value(client):
    listing = ListingFactory(name="Scottie tissue")
    response = client.get("/?q=nothing-matches-this&q=scottie")
    assert response.status_code == 200
    assert listing.name in response.content.decode()


# --- Forms keep refusing NUL in their fields, as Django's fields do --------------------------

NULL_REFUSED = "Null characters are not allowed."


@pytest.fixture
def person(client):
    device, _ = device_with_cookie(client)
    return device


def form_posts(person) -> list[tuple[str, dict]]:
    listing = ListingFactory.create()
    watch = WatchFactory.create(device=person, listing=listing)
    return [
        ("/add/", {"link": "https://item.rakuten.co.jp/shop/item\x00/"}),
        ("/products/add", {"jan": "4901234567894\x00"}),
        (f"/listings/{listing.pk}/", {"trigger": "target_price", "target_price": "900\x00"}),
        (f"/watches/{watch.pk}/edit/", {"trigger": "target_price", "target_price": "9\x00"}),
        ("/settings/email", {"email": "person\x00@mail.example"}),
        ("/settings/quiet", {"quiet_start": "22:00", "quiet_end": "07:00", "time_zone": "A\x00"}),
    ]


def test_every_form_refuses_a_nul_in_a_field_and_changes_nothing(client, person):
    for url, data in form_posts(person):
        watches_before = list(person.watches.values_list("pk", "target_price"))
        response = client.post(url, data, headers={"accept-language": "en"})
        assert response.status_code in (200, 400), url
        assert NULL_REFUSED in response.content.decode(), url
        person.refresh_from_db()
        assert person.email == "" and person.quiet_start is None, url
        assert list(person.watches.values_list("pk", "target_price")) == watches_before, url
