"""Migrations: a database made at an earlier main (tests/migration_fixture.py) migrates forward
with every row kept, back again, and ends with the tables the models of now describe — on
SQLite and on PostgreSQL, whichever the suite runs on."""

from __future__ import annotations

import datetime as dt

import pytest
from django.apps import apps as installed_apps
from django.db import IntegrityError, connections, transaction

from tests.migration_fixture import (
    MAIN_LEAVES,
    carried,
    fresh_database,
    migrate,
    snapshot,
    write_rows,
)


@pytest.fixture
def made_at_main(tmp_path, django_db_blocker):
    """A new database, migrated to MAIN_LEAVES and filled through those historical models;
    yields (connection, rows as written)."""
    with django_db_blocker.unblock(), fresh_database(tmp_path) as connection:
        then = migrate(connection, MAIN_LEAVES)
        labels = write_rows(then, connection.alias)
        yield connection, snapshot(then, connection.alias, labels)


def tables_and_columns(connection) -> dict[str, set[str]]:
    with connection.cursor() as cursor:
        return {
            table: {
                column.name
                for column in connection.introspection.get_table_description(cursor, table)
            }
            for table in connection.introspection.table_names(cursor)
        }


def test_a_database_made_at_main_migrates_forward_with_no_row_lost(made_at_main):
    connection, written = made_at_main
    assert all(written.values()), "every table of the fixture has rows"
    now = migrate(connection)
    expected = carried(written)
    assert snapshot(now, connection.alias, expected) == expected


def test_the_demo_catalogue_keeps_its_rows_in_the_demo_apps_table(made_at_main):
    connection, _ = made_at_main
    migrate(connection)
    from demo.models import DemoProduct

    assert DemoProduct._meta.db_table == "demo_demoproduct"
    products = DemoProduct.objects.using(connection.alias).order_by("item_code")
    assert [(p.item_code, p.price, p.fault, p.held_until) for p in products] == [
        ("cf-boss-can-24", 2180, "rate_limited", None),
        ("tp-scottie-12r", 520, "", None),
    ]
    tables = tables_and_columns(connection)
    assert "watches_demoproduct" not in tables


def test_staff_permission_and_admin_history_follow_the_demo_product(made_at_main):
    connection, _ = made_at_main
    migrate(connection)
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth.models import Group

    group = Group.objects.using(connection.alias).get(name="demo editors")
    assert [
        (p.content_type.app_label, p.content_type.model, p.codename)
        for p in group.permissions.all()
    ] == [("demo", "demoproduct", "change_demoproduct")]
    entry = LogEntry.objects.using(connection.alias).get()
    assert entry.content_type.model_class().__module__ == "demo.models"


def test_after_migrating_every_model_has_its_table_and_columns(made_at_main):
    connection, _ = made_at_main
    migrate(connection)
    tables = tables_and_columns(connection)
    for model in installed_apps.get_models():
        if not model._meta.managed or model._meta.proxy:
            continue
        columns = {field.column for field in model._meta.local_concrete_fields}
        assert tables.get(model._meta.db_table) == columns, model._meta.label


def test_the_demo_move_migrates_back_with_no_row_lost_and_forward_again(made_at_main):
    connection, written = made_at_main
    migrate(connection)
    then = migrate(connection, MAIN_LEAVES)
    assert snapshot(then, connection.alias, written) == written
    now = migrate(connection)
    expected = carried(written)
    assert snapshot(now, connection.alias, expected) == expected


def test_the_fixture_database_is_not_the_test_database(made_at_main):
    connection, _ = made_at_main
    assert connection.settings_dict["NAME"] != connections["default"].settings_dict["NAME"]


def test_two_rows_of_one_watch_in_flight_before_the_index_leave_one(made_at_main):
    """Before outbox 0005, two dispatchers could hold rows of one watch and channel; the
    migration keeps the latest claim in flight and sends the other back to `retry`, with its
    event, so the one-in-flight index can be created."""
    connection, _ = made_at_main
    then = migrate(connection, MAIN_LEAVES)
    outbox = then.get_model("outbox", "Outbox")._default_manager.using(connection.alias)
    sent = outbox.get(status="sent")
    flying = []
    for n, claimed in enumerate(
        [dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 2, tzinfo=dt.UTC)]
    ):
        flying.append(
            outbox.create(
                watch_id=sent.watch_id,
                device_id=sent.device_id,
                channel=sent.channel,
                trigger=sent.trigger,
                status="sending",
                detected_at=claimed - dt.timedelta(days=10),
                detected_payload={},
                attempts=1,
                next_attempt_at=claimed,
                claimed_at=claimed,
                claimed_by=f"holder-{n}",
            ).pk
        )

    now = migrate(connection)

    rows = now.get_model("outbox", "Outbox")._default_manager.using(connection.alias)
    earlier, latest = (rows.get(pk=pk) for pk in flying)
    assert (latest.status, latest.claimed_by) == ("sending", "holder-1")
    assert (earlier.status, earlier.reason, earlier.claimed_by) == ("retry", "lease_expired", "")
    event = now.get_model("outbox", "OutboxEvent")._default_manager.using(connection.alias)
    assert event.filter(outbox_id=earlier.pk, to_status="retry", actor="migration").count() == 1


def test_listings_made_at_main_are_nobodys_offers_and_products_migrate_back(made_at_main):
    connection, written = made_at_main
    now = migrate(connection)
    alias = connection.alias
    listings = now.get_model("watches", "Listing")._default_manager.using(alias)
    assert listings.exists()
    assert set(listings.values_list("product_id", "jan")) == {(None, "")}

    product = (
        now.get_model("watches", "Product")
        ._default_manager.using(alias)
        .create(jan="4901750404406", name="スコッティ 12ロール", units_per_pack=12)
    )
    listings.filter(source="demo").update(product=product, jan=product.jan)
    # Back to before products: the offer stays a listing, only its product is gone.
    back = migrate(connection, {"watches": "0007_email_and_quiet_hours"})
    kept = {"watches.Listing": carried(written)["watches.Listing"]}
    assert snapshot(back, alias, kept) == kept
    assert "watches_product" not in tables_and_columns(connection)
    again = migrate(connection)
    assert snapshot(again, alias, kept) == kept


# The foreign keys whose own one-column index a wider index already serves (migrations
# watches 0011 and outbox 0008): table -> column.
UNINDEXED_FOREIGN_KEYS = {
    "watches_pricepoint": "listing_id",
    "watches_watch": "device_id",
    "outbox_outbox": "device_id",
    "outbox_outboxevent": "outbox_id",
    "outbox_countsnapshotrow": "snapshot_id",
}


def indexes_by_columns(connection, table: str) -> dict[tuple[str, ...], str]:
    """Columns -> name of every index and unique key of `table` (primary key aside)."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return {
        tuple(info["columns"]): name
        for name, info in constraints.items()
        if (info["index"] or info["unique"]) and not info["primary_key"] and info["columns"]
    }


def test_a_foreign_key_a_wider_index_serves_loses_its_own_index_and_gets_it_back(made_at_main):
    connection, written = made_at_main
    migrate(connection)
    for table, column in UNINDEXED_FOREIGN_KEYS.items():
        indexes = indexes_by_columns(connection, table)
        assert (column,) not in indexes, table
        assert any(len(key) > 1 and key[0] == column for key in indexes), table

    migrate(connection, {"outbox": "0007_lease_beats_stay_hot"})
    migrate(connection, {"watches": "0010_listing_updates_stay_hot"})
    for table, column in UNINDEXED_FOREIGN_KEYS.items():
        assert (column,) in indexes_by_columns(connection, table), table

    now = migrate(connection)
    expected = carried(written)
    assert snapshot(now, connection.alias, expected) == expected
    assert all(
        (column,) not in indexes_by_columns(connection, table)
        for table, column in UNINDEXED_FOREIGN_KEYS.items()
    )


def test_no_model_indexes_a_foreign_key_a_wider_index_already_leads_with():
    """Each index costs every insert; one that a wider index's leading column serves answers
    no lookup the wider one could not (a cascade's included)."""
    redundant = []
    for model in installed_apps.get_models():
        if not model._meta.managed or model._meta.proxy:
            continue
        wider = [
            [model._meta.get_field(name.lstrip("-")).column for name in index.fields]
            for index in model._meta.indexes
            if index.condition is None and len(index.fields) > 1
        ] + [
            [model._meta.get_field(name).column for name in constraint.fields]
            for constraint in model._meta.constraints
            if getattr(constraint, "condition", True) is None
            and len(getattr(constraint, "fields", ())) > 1
        ]
        for field in model._meta.local_fields:
            leads = any(columns[0] == field.column for columns in wider)
            if field.is_relation and field.db_index and not field.unique and leads:
                redundant.append(f"{model._meta.label}.{field.name}")
    assert redundant == []


def test_the_dedup_day_index_main_built_rounding_is_rebuilt_exact(made_at_main):
    """Main's SQLite index dated 14:59:59.9995 UTC as the next Tokyo day (date() rounds to the
    millisecond); after migrating, the last microsecond of a day belongs to that day."""
    connection, _ = made_at_main
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL's day was exact: its index is not rebuilt")
    then = migrate(connection, MAIN_LEAVES)
    sent = then.get_model("outbox", "Outbox")._default_manager.using(connection.alias).first()
    name = "outbox_one_per_watch_trigger_day_channel"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP INDEX "{name}"')
        # The index as main's expression made it.
        cursor.execute(
            f'CREATE UNIQUE INDEX "{name}" ON "outbox_outbox" ("watch_id", "trigger",'
            ' (date("detected_at", \'+9 hours\')), "channel") WHERE NOT ("status" = \'dropped\')'
        )
    migrate(connection)

    def insert(detected_at: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                'INSERT INTO outbox_outbox (watch_id, device_id, channel, "trigger", status,'
                " previous_status, reason, detail, detected_at, detected_payload, retry_count,"
                " attempts, next_attempt_at, claimed_by, created_at, updated_at) VALUES"
                " (%s, %s, 'console', 'lowest', 'pending', '', '', '', %s, '{}', 0, 0, %s, '',"
                " %s, %s)",
                [sent.watch_id, sent.device_id, detected_at, *[detected_at] * 3],
            )

    insert("2030-01-01 03:00:00")
    with pytest.raises(IntegrityError), transaction.atomic(using=connection.alias):
        insert("2030-01-01 14:59:59.999999")
    insert("2030-01-01 15:00:00")
