"""Staff levers: requeue, drop, retry now, pause a listing. Each moves only the rows it may,
through the state machine, with the staff user's name on the event, and says why it left the
others alone. Nothing moves a sent row."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.forms import MultiWidget
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from outbox.models import Outbox, OutboxEvent, Reason, Status
from outbox.reporting import levers
from outbox.transitions import ALLOWED, Outcome, TransitionNotAllowed, check_allowed, transition
from tests.factories import ListingFactory, WatchFactory
from tests.outbox_states import row_in
from watches.marketplaces.base import Observation
from watches.models import Listing
from watches.pausing import pause_listings
from watches.polling.observations import observe
from watches.polling.poll import due_listings

pytestmark = pytest.mark.django_db

CHANGELIST_URL = "/admin/outbox/outbox/"
NOW = dt.datetime(2026, 3, 10, 3, 0, tzinfo=dt.UTC)


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def one_of_each(frozen) -> dict[Status, Outbox]:
    return {status: row_in(status, retry_count=3) for status in Status}


def run_action(client, action: str, rows) -> list[str]:
    response = client.post(
        CHANGELIST_URL,
        {"action": action, "_selected_action": [row.pk for row in rows]},
        follow=True,
    )
    assert response.status_code == 200
    return [str(m) for m in get_messages(response.wsgi_request)]


def status_of(row: Outbox) -> str:
    row.refresh_from_db()
    return row.status


def staff_events(row: Outbox) -> list[OutboxEvent]:
    return list(row.events.filter(actor="admin").order_by("id"))


def test_requeue_moves_failed_and_retry_rows_and_reports_the_rest(admin_client, one_of_each):
    rows = one_of_each
    messages = run_action(admin_client, "requeue_rows", rows.values())
    assert messages == [
        "2 requeued; 4 skipped because they are dropped (1) or pending (1) or sending (1) or "
        "sent (1) — only failed or retrying rows can be requeued."
    ]
    for status in (Status.FAILED, Status.RETRY):
        row = rows[status]
        row.refresh_from_db()
        assert (row.status, row.reason, row.retry_count, row.claimed_by) == (
            Status.PENDING,
            Reason.REQUEUED,
            0,
            "",
        )
        assert row.next_attempt_at == NOW  # due now
        (event,) = staff_events(row)
        assert (event.from_status, event.to_status, event.reason) == (status, "pending", "requeued")
        # the retry count it had is kept in the event
        assert event.data["retry_count"] == 3
        assert event.data["previous_reason"] in (Reason.DELIVER_SERVER, Reason.REFETCH_NETWORK)
    for status in (Status.PENDING, Status.SENDING, Status.SENT, Status.DROPPED):
        assert status_of(rows[status]) == status
        assert staff_events(rows[status]) == []


def test_drop_moves_pending_and_retry_rows_only(admin_client, one_of_each):
    rows = one_of_each
    messages = run_action(admin_client, "drop_rows", rows.values())
    assert messages[0].startswith("2 dropped; 4 skipped because they are dropped (1) or failed (1)")
    assert "only pending or retrying rows can be dropped" in messages[0]
    for status in (Status.PENDING, Status.RETRY):
        row = rows[status]
        row.refresh_from_db()
        assert (row.status, row.reason) == (Status.DROPPED, Reason.MANUAL)
        (event,) = staff_events(row)
        assert (event.from_status, event.to_status, event.reason) == (status, "dropped", "manual")
    # a row being sent right now is left to its dispatcher
    assert status_of(rows[Status.SENDING]) == Status.SENDING


def test_retry_now_makes_retry_rows_due_and_keeps_their_reason(admin_client, one_of_each):
    rows = one_of_each
    retry = rows[Status.RETRY]
    assert retry.next_attempt_at > NOW
    messages = run_action(admin_client, "retry_rows_now", rows.values())
    assert messages[0].startswith("1 made due now; 5 skipped because")
    retry.refresh_from_db()
    assert (retry.status, retry.reason, retry.retry_count) == (
        Status.RETRY,
        Reason.REFETCH_NETWORK,
        3,
    )
    assert retry.next_attempt_at == NOW
    (event,) = staff_events(retry)
    assert (event.from_status, event.to_status, event.reason) == ("retry", "retry", "requeued")
    assert event.detail == "retry now (staff)"


def test_a_clean_run_reports_success_only(admin_client, frozen):
    rows = [row_in(Status.FAILED), row_in(Status.FAILED)]
    assert run_action(admin_client, "requeue_rows", rows) == ["2 requeued."]


@pytest.mark.parametrize("lever", [levers.requeue, levers.drop, levers.retry_now])
def test_no_lever_moves_a_sent_row(lever, frozen):
    sent = row_in(Status.SENT)
    before = Outbox.objects.filter(pk=sent.pk).values().get()
    result = lever(Outbox.objects.filter(pk=sent.pk), actor="staff")
    assert (result.done, dict(result.skipped)) == (0, {"sent": 1})
    assert Outbox.objects.filter(pk=sent.pk).values().get() == before
    assert not sent.events.filter(actor="staff").exists()


def test_the_state_machine_has_no_move_out_of_sent():
    assert all(Status.SENT not in froms for froms in ALLOWED.values())
    for to in Status:
        with pytest.raises(TransitionNotAllowed):
            check_allowed(to, [Status.SENT])


def test_a_row_taken_by_the_dispatcher_meanwhile_is_reported_not_moved(frozen):
    """The lever reads eligible rows, then moves them with a conditional UPDATE: a row the
    dispatcher claimed in between is not moved and is counted under its new status."""
    row = row_in(Status.PENDING)
    queryset = Outbox.objects.filter(pk=row.pk)

    def dispatcher_claims_first(ids):
        transition(ids, Outcome(Status.SENDING, Reason.CLAIMED, values={"claimed_by": "d"}))
        return transition(ids, Outcome(Status.DROPPED, Reason.MANUAL), expect=levers.DROP_FROM)

    result = levers._apply(queryset, levers.DROP_FROM, "dropped", dispatcher_claims_first)
    assert (result.done, dict(result.skipped)) == (0, {"sending": 1})
    assert status_of(row) == Status.SENDING


def test_select_across_moves_every_matching_row(admin_client, frozen):
    rows = [row_in(Status.FAILED) for _ in range(5)] + [row_in(Status.SENT)]
    response = admin_client.post(
        f"{CHANGELIST_URL}?status__exact=failed",
        {
            "action": "requeue_rows",
            "select_across": "1",
            "index": "0",
            "_selected_action": [rows[0].pk],
        },
        follow=True,
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["5 requeued."]
    assert Outbox.objects.filter(status=Status.PENDING).count() == 5
    assert status_of(rows[-1]) == Status.SENT


def test_a_big_selection_moves_in_batches(frozen):
    rows = [row_in(Status.RETRY) for _ in range(5)] + [row_in(Status.SENT)]
    result = levers.drop(Outbox.objects.all(), actor="ops", batch=2)
    assert (result.done, dict(result.skipped)) == (5, {"sent": 1})
    assert [status_of(r) for r in rows] == ["dropped"] * 5 + ["sent"]


# --- pausing a listing ----------------------------------------------------------------------


def rows_of_listing(listing) -> dict[Status, Outbox]:
    return {s: row_in(s, watch=WatchFactory(listing=listing)) for s in Status}


def test_pausing_listings_drops_their_pending_and_retry_rows(admin_client, frozen):
    listing, other = ListingFactory(), ListingFactory()
    rows, others = rows_of_listing(listing), rows_of_listing(other)
    response = admin_client.post(
        "/admin/watches/listing/",
        {"action": "pause_selected", "_selected_action": [listing.pk]},
        follow=True,
    )
    (message,) = [str(m) for m in get_messages(response.wsgi_request)]
    assert message == (
        "1 listing paused; notifications: 2 dropped; 1 skipped because they are sending (1)"
        " — only pending or retrying rows can be dropped."
    )
    listing.refresh_from_db()
    assert listing.paused
    for status in (Status.PENDING, Status.RETRY):
        row = rows[status]
        row.refresh_from_db()
        assert (row.status, row.reason) == (Status.DROPPED, Reason.LISTING_PAUSED)
        assert staff_events(row)[0].reason == "listing_paused"
    for status in (Status.SENDING, Status.SENT, Status.FAILED):
        assert status_of(rows[status]) == status
    # another listing's rows are untouched
    assert {status_of(r) for r in others.values()} == {s.value for s in Status}


def test_ticking_paused_on_the_listing_page_drops_its_rows(admin_client, frozen):
    listing = ListingFactory()
    pending = row_in(Status.PENDING, watch=WatchFactory(listing=listing))
    form = (
        admin_client.get(f"/admin/watches/listing/{listing.pk}/change/").context["adminform"].form
    )
    data = form_data(form)
    data["paused"] = "on"
    response = admin_client.post(f"/admin/watches/listing/{listing.pk}/change/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    pending.refresh_from_db()
    assert (pending.status, pending.reason) == (Status.DROPPED, Reason.LISTING_PAUSED)
    assert staff_events(pending)[0].actor == "admin"


def test_ticking_paused_on_the_listing_page_says_one_listing_was_paused(admin_client, frozen):
    """The listing is paused by the rule that reports it, not saved paused before it: staff
    read "1 listing paused", with what became of its notifications."""
    listing = ListingFactory()
    row_in(Status.PENDING, watch=WatchFactory(listing=listing))
    page = f"/admin/watches/listing/{listing.pk}/change/"
    data = form_data(admin_client.get(page).context["adminform"].form)
    data["paused"] = "on"
    response = admin_client.post(page, data, follow=True)
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(m.startswith("1 listing paused; notifications: 1 dropped") for m in messages), (
        messages
    )
    listing.refresh_from_db()
    assert listing.paused


def test_saving_the_listing_page_keeps_what_a_poll_observed_while_it_was_open(admin_client, frozen):
    """What polling observes is shown on the page, not posted back: a price observed between
    the page's GET and its POST stays, with its time (never a stale price under a fresh time)."""
    listing = ListingFactory(price=1234, last_polled_at=NOW - dt.timedelta(minutes=5))
    page = f"/admin/watches/listing/{listing.pk}/change/"
    shown = admin_client.get(page)
    data = form_data(shown.context["adminform"].form)
    assert not {"price", "in_stock", "points", "low_90", "last_polled_at"} & set(data)
    assert '<div class="readonly">1234</div>' in shown.content.decode()
    answer = Observation(
        item_code=listing.item_code, price=900, shipping=0, in_stock=True, observed_at=NOW
    )
    observe([(Listing.objects.get(pk=listing.pk), answer)], NOW, judging=False).save()
    data["name"] = "Renamed by staff"
    response = admin_client.post(page, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    listing.refresh_from_db()
    assert (listing.name, listing.price, listing.last_polled_at) == ("Renamed by staff", 900, NOW)


def test_the_listing_page_shows_every_column_polling_writes_read_only():
    """A new column an observation writes cannot become editable on the page unnoticed."""
    from watches.admin import POLLED_FIELDS
    from watches.polling import observations

    written = {*observations._OBSERVED, *observations._STATS, *observations._FAILED}
    assert written <= set(POLLED_FIELDS)


def test_unticking_paused_on_the_listing_page_tracks_it_again_from_a_request_of_its_own(
    admin_client, frozen
):
    """Nothing was kept of it while paused: it counts as never observed, so the next poll asks
    for it first, rather than a shop's feed vouching for a price it may have shown since."""
    listing = ListingFactory(paused=True)
    form = (
        admin_client.get(f"/admin/watches/listing/{listing.pk}/change/").context["adminform"].form
    )
    data = form_data(form)
    del data["paused"]
    response = admin_client.post(f"/admin/watches/listing/{listing.pk}/change/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    listing.refresh_from_db()
    assert (listing.paused, listing.last_polled_at) == (False, None)
    assert listing in due_listings(timezone.now())


def form_data(form) -> dict[str, str]:
    """What a browser would post back for an unchanged form."""
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(field.widget, MultiWidget):
            parts = field.widget.decompress(value)
            assert parts is not None, name
            for i, part in enumerate(parts):
                data[f"{name}_{i}"] = "" if part is None else str(part)
        elif value is not None and value is not False:
            data[name] = str(value)
    return data


def test_pause_listings_is_idempotent(frozen):
    listing = ListingFactory()
    result = pause_listings([listing.pk], actor="ops")
    assert (result.paused, result.reports) == (1, ["0 dropped."])
    row = row_in(Status.PENDING, watch=WatchFactory(listing=listing))
    result = pause_listings([listing.pk], actor="ops")
    assert (result.paused, result.reports) == (0, ["1 dropped."])
    assert status_of(row) == Status.DROPPED


# --- a mangled action form -------------------------------------------------------------------

HUGE = "9" * 30  # beyond any integer column, SQLite's and PostgreSQL's


@pytest.mark.parametrize("bad", ["abc", "²", "1.5", HUGE])
def test_an_action_posted_with_a_bad_row_id_is_400_and_moves_nothing(admin_client, frozen, bad):
    failed = row_in(Status.FAILED)
    admin_client.raise_request_exception = False
    response = admin_client.post(
        CHANGELIST_URL, {"action": "requeue_rows", "_selected_action": [failed.pk, bad]}
    )
    assert response.status_code == 400
    assert "nothing was done" in response.content.decode()
    assert status_of(failed) == Status.FAILED
    assert staff_events(failed) == []


def test_every_admin_of_ours_with_actions_answers_a_bad_row_id_with_400(admin_client, admin_user):
    """Django's own "delete selected" included: it filters `pk__in` with what was posted."""
    request = RequestFactory().post("/admin/")
    request.user = admin_user
    checked = []
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in {"watches", "outbox", "demo"}:
            continue
        actions = model_admin.get_actions(request)
        if not actions:
            continue
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        before = model._default_manager.count()
        admin_client.raise_request_exception = False
        response = admin_client.post(
            url, {"action": next(iter(actions)), "index": "0", "_selected_action": [HUGE]}
        )
        assert (url, response.status_code) == (url, 400)
        assert model._default_manager.count() == before
        checked.append(model._meta.model_name)
    assert {"outbox", "listing", "watch", "device", "product"} <= set(checked)


# --- who may pull the levers ----------------------------------------------------------------


def test_staff_with_view_permission_only_cannot_pull_levers(client, frozen):
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_outbox"))
    client.force_login(viewer)
    failed = row_in(Status.FAILED)
    response = client.get(CHANGELIST_URL)
    assert response.status_code == 200
    assert "requeue_rows" not in response.content.decode()
    client.post(CHANGELIST_URL, {"action": "requeue_rows", "_selected_action": [failed.pk]})
    assert status_of(failed) == Status.FAILED


def test_staff_with_change_permission_can(client, frozen):
    operator = User.objects.create_user("operator", password="pw", is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_outbox", "change_outbox"])
    )
    client.force_login(operator)
    failed = row_in(Status.FAILED)
    run_action(client, "requeue_rows", [failed])
    assert status_of(failed) == Status.PENDING
    assert failed.events.latest("id").actor == "operator"


def test_lever_timestamps_use_now(frozen):
    row = row_in(Status.RETRY)
    levers.retry_now(Outbox.objects.filter(pk=row.pk), actor="ops")
    row.refresh_from_db()
    assert row.updated_at == timezone.now() == NOW


def test_an_address_typed_without_its_scheme_is_saved_as_https(admin_client, frozen):
    """The marketplaces serve https only, and an http image is mixed content on our pages."""
    listing = ListingFactory(image_url="")
    page = f"/admin/watches/listing/{listing.pk}/change/"
    data = form_data(admin_client.get(page).context["adminform"].form)
    data["image_url"] = "thumbnail.image.rakuten.co.jp/@0_mall/shop/cabinet/pack.jpg"
    response = admin_client.post(page, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    listing.refresh_from_db()
    assert (
        listing.image_url == "https://thumbnail.image.rakuten.co.jp/@0_mall/shop/cabinet/pack.jpg"
    )
