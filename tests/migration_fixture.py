"""A database made by the migrations of an earlier main, filled through that main's historical
models, then migrated forward: nothing written may be lost.

`tests/test_migrations.py` uses it; a branch that adds a migration extends it here:

- a table that existed at `MAIN_LEAVES` but has no rows yet: add them in `write_rows`;
- a model or field that moves or is renamed: `MOVED_MODELS` / `RENAMED_FIELDS`, so the check
  looks for the rows where they are now;
- values a migration changes on purpose (a task path, a content type): a function in
  `CHANGED_BY_MIGRATIONS` that says what each row must look like afterwards;
- a newer baseline (rows only a later schema can hold): a second leaves dict and writer, run
  through the same `fresh_database` / `migrate` / `snapshot`.

The database is a new one beside the test database (an SQLite file, or a PostgreSQL database
named after the test database), never the test database itself.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

from django.apps.registry import Apps
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

# The leaf migration of every app on main before the demo app existed (Django 5.2, django-q2
# 1.11): the schema the fixture is written in.
MAIN_LEAVES: dict[str, str] = {
    "admin": "0003_logentry_add_action_flag_choices",
    "auth": "0012_alter_user_first_name_max_length",
    "contenttypes": "0002_remove_content_type_name",
    "sessions": "0001_initial",
    "django_q": "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more",
    "watches": "0003_device_transfer_and_unique_endpoint",
    "outbox": "0001_initial",
}

# label then -> label now
MOVED_MODELS: dict[str, str] = {"watches.DemoProduct": "demo.DemoProduct"}
# label now -> {field then: field now}
RENAMED_FIELDS: dict[str, dict[str, str]] = {}

Row = dict[str, object]
# model label -> primary key -> the row's concrete fields (attnames: `listing_id`, not `listing`)
Rows = dict[str, dict[object, Row]]

AT = dt.datetime(2026, 11, 20, 9, 30, tzinfo=zoneinfo.ZoneInfo("Asia/Tokyo"))


@contextmanager
def fresh_database(folder: Path, alias: str = "made_at_main") -> Iterator[BaseDatabaseWrapper]:
    """A connection `alias` to a new, empty database of the test database's kind, dropped
    afterwards: an SQLite file in `folder`, or a PostgreSQL database named after the test
    database (so parallel checkouts with their own TEST_DATABASE_NAME never meet)."""
    default = connections["default"]
    config = dict(connections.settings["default"])
    postgres = default.vendor == "postgresql"
    if postgres:
        # The test database's name: the run has switched the connection over to it.
        name = f"{default.settings_dict['NAME']}_{alias}"
        _postgres_admin(default, f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"')
    else:
        name = str(folder / f"{alias}.sqlite3")
    config["NAME"] = name
    connections.settings[alias] = config
    try:
        yield connections[alias]
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]
        if postgres:
            _postgres_admin(default, f'DROP DATABASE IF EXISTS "{name}"')


def _postgres_admin(connection: BaseDatabaseWrapper, *statements: str) -> None:
    with connection._nodb_cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def migrate(connection: BaseDatabaseWrapper, leaves: Mapping[str, str] | None = None) -> Apps:
    """Migrate the database to `leaves` (app label -> migration name; None: every app's
    latest) and return the historical models of that state."""
    executor = MigrationExecutor(connection)
    targets = list(leaves.items()) if leaves is not None else executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    executor.loader.build_graph()
    assert executor.migration_plan(targets) == [], "migrations left to run"
    return executor.loader.project_state(targets).apps


def snapshot(apps: Apps, alias: str, labels: Iterable[str] | Rows) -> Rows:
    """Every row of these models, as their concrete fields; given Rows instead of labels,
    only the fields those rows have (a column added since is not part of what was kept)."""
    rows: Rows = {}
    for label in labels:
        model = apps.get_model(label)
        names = [field.attname for field in model._meta.concrete_fields]
        if isinstance(labels, Mapping):
            wanted = {name for row in labels[label].values() for name in row}
            names = [name for name in names if name in wanted]
        pk = model._meta.pk.attname
        rows[label] = {
            row[pk]: row for row in model._default_manager.using(alias).order_by(pk).values(*names)
        }
    return rows


def carried(rows: Rows) -> Rows:
    """What `rows`, written at MAIN_LEAVES, must be after every migration since: under the
    models' labels and field names of now, with the changes migrations make on purpose."""
    now: Rows = {}
    for label, by_pk in rows.items():
        label_now = MOVED_MODELS.get(label, label)
        renamed = RENAMED_FIELDS.get(label_now, {})
        change = CHANGED_BY_MIGRATIONS.get(label_now, lambda row: row)
        now[label_now] = {
            pk: change({renamed.get(name, name): value for name, value in row.items()})
            for pk, row in by_pk.items()
        }
    return now


def _demo_tick_task_moved(row: Row) -> Row:
    # watches 0004: the demo tick's task moved to the demo app.
    if row["func"] == "watches.tasks.demo_tick":
        return {**row, "func": "demo.tasks.demo_tick"}
    return row


def _demo_content_type_moved(row: Row) -> Row:
    # demo 0001: the demo product's content type (and so its permissions) moved with it.
    if (row["app_label"], row["model"]) == ("watches", "demoproduct"):
        return {**row, "app_label": "demo"}
    return row


CHANGED_BY_MIGRATIONS: dict[str, Callable[[Row], Row]] = {
    "django_q.Schedule": _demo_tick_task_moved,
    "contenttypes.ContentType": _demo_content_type_moved,
}


def write_rows(apps: Apps, alias: str) -> list[str]:
    """Rows in every table of ours (and the framework rows that point at them), through the
    historical models of MAIN_LEAVES, with the values that are easiest to lose: nulls,
    decimals, JSON, times, flags. Returns the labels written."""

    def make(label: str, **values):
        return apps.get_model(label)._default_manager.using(alias).create(**values)

    make(
        "watches.DemoProduct",
        item_code="tp-scottie-12r",
        name="スコッティ 12ロール",
        category="トイレットペーパー",
        units_per_pack=12,
        unit_label="roll",
        price=520,
        shipping=0,
        in_stock=True,
    )
    make(
        "watches.DemoProduct",
        item_code="cf-boss-can-24",
        name="BOSS 24本",
        price=2180,
        shipping=None,
        in_stock=False,
        fault="rate_limited",
        shop_name="Other Shop",
    )
    demo = make(
        "watches.Listing",
        source="demo",
        item_code="tp-scottie-12r",
        name="スコッティ 12ロール",
        category="トイレットペーパー",
        units_per_pack=12,
        unit_label="roll",
        price=520,
        shipping=0,
        in_stock=True,
        typical_price=598,
        low_90=498,
        last_polled_at=AT,
        created_at=AT - dt.timedelta(days=90),
    )
    rakuten = make(
        "watches.Listing",
        source="rakuten",
        item_code="shop:item-1",
        name="",
        url="https://item.rakuten.co.jp/shop/item-1/",
        price=None,
        in_stock=None,
        paused=True,
        last_error="network: reset",
        last_error_at=AT,
        created_at=AT,
    )
    for minutes, price, in_stock in ((0, 598, True), (480, None, False), (960, 520, True)):
        make(
            "watches.PricePoint",
            listing=demo,
            observed_at=AT + dt.timedelta(minutes=minutes),
            price=price,
            shipping=0 if price else None,
            in_stock=in_stock,
        )
    subscribed = make(
        "watches.Device",
        token_hash="a" * 64,
        channel="webpush",
        language="en",
        push_endpoint="https://fcm.googleapis.com/fcm/send/abc",
        push_p256dh="BOr" + "A" * 84,
        push_auth="A" * 22,
        push_active=True,
        push_subscribed_at=AT,
        transfer_token_hash="b" * 64,
        transfer_expires_at=AT + dt.timedelta(minutes=15),
        created_at=AT,
        last_seen_at=AT,
    )
    console = make(
        "watches.Device",
        token_hash="demo-watcher",
        channel="console",
        created_at=AT,
        last_seen_at=AT,
    )
    target = make(
        "watches.Watch",
        device=subscribed,
        listing=demo,
        trigger="target_price",
        target_price=45,
        use_unit_price=True,
        last_notified_price=Decimal("43.34"),
        last_notified_at=AT,
        created_at=AT,
    )
    removed = make(
        "watches.Watch",
        device=console,
        listing=rakuten,
        trigger="price_drop",
        drop_percent=15,
        paused=True,
        removed_at=AT,
        created_at=AT,
    )
    sent = make(
        "outbox.Outbox",
        watch=target,
        device=subscribed,
        channel="webpush",
        trigger="target_price",
        status="sent",
        previous_status="sending",
        reason="delivered",
        detected_at=AT,
        detected_payload={"price": 520, "line": "45.00", "listing": "スコッティ"},
        sent_message={"title": "¥520", "tag": "w1"},
        attempts=1,
        next_attempt_at=AT,
        claimed_at=AT,
        claimed_by="holder-1",
        sent_at=AT,
        created_at=AT,
        updated_at=AT,
    )
    make(
        "outbox.Outbox",
        watch=removed,
        device=console,
        channel="console",
        trigger="price_drop",
        status="retry",
        previous_status="sending",
        reason="refetch_rate_limited",
        detail="429",
        detected_at=AT,
        detected_payload={},
        retry_count=3,
        attempts=4,
        next_attempt_at=AT + dt.timedelta(minutes=4),
        created_at=AT,
        updated_at=AT,
    )
    make(
        "outbox.OutboxEvent",
        outbox=sent,
        from_status="pending",
        to_status="sending",
        reason="claimed",
        actor="holder-1",
        at=AT,
    )
    make(
        "outbox.OutboxEvent",
        outbox=sent,
        from_status="sending",
        to_status="sent",
        reason="delivered",
        data={"status": 201, "price": 520},
        actor="holder-1",
        at=AT,
    )
    make(
        "outbox.DispatchRun",
        started_at=AT,
        finished_at=AT + dt.timedelta(seconds=2),
        holder="holder-1",
        claimed=2,
        sent=1,
        retry=1,
        error="",
    )
    make(
        "django_q.Schedule",
        name="demo-tick",
        func="watches.tasks.demo_tick",
        schedule_type="I",
        minutes=1,
        repeats=-1,
        next_run=AT,
    )
    make(
        "django_q.Schedule",
        name="watches-poll",
        func="watches.tasks.poll",
        schedule_type="I",
        minutes=15,
        repeats=-1,
        next_run=AT,
    )
    # Staff who may edit demo products, and admin history of one: they must follow the model.
    demo_type = make("contenttypes.ContentType", app_label="watches", model="demoproduct")
    make("contenttypes.ContentType", app_label="watches", model="listing")
    may_edit = make(
        "auth.Permission",
        content_type=demo_type,
        codename="change_demoproduct",
        name="Can change demo product",
    )
    make("auth.Group", name="demo editors").permissions.add(may_edit)
    staff = make("auth.User", username="staff", is_staff=True, password="!", date_joined=AT)
    make(
        "admin.LogEntry",
        user=staff,
        content_type=demo_type,
        object_id="1",
        object_repr="tp-scottie-12r",
        action_flag=2,
        change_message="price",
        action_time=AT,
    )
    return [
        "watches.DemoProduct", "watches.Listing", "watches.PricePoint", "watches.Device",
        "watches.Watch", "outbox.Outbox", "outbox.OutboxEvent", "outbox.DispatchRun",
        "django_q.Schedule", "contenttypes.ContentType", "auth.Permission", "auth.Group",
        "auth.Group_permissions", "auth.User", "admin.LogEntry",
    ]  # fmt: skip
