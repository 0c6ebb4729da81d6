"""Listing updates that PostgreSQL can make in place (heap-only tuples).

Every poll and every dispatcher re-fetch rewrites a listing's observed state (price, stock,
`last_polled_at`, statistics). `last_polled_at` was indexed (`listing_poll_due`), so each of
those updates inserted a new entry into every index of the table — the trigram GIN over the
search text among them. Without it, no column an observation writes is indexed, and with a
fill factor of 80 the new version usually fits on the listing's own page: the update touches
no index at all (a 500-listing UPDATE went from ~31 to ~17 ms in bench_dispatch's world).

The index no longer earned its keep: the poll plan reads every due listing to score it, which
at any size worth an index is most of the table (a sequential scan is what the planner picks
there anyway). Existing tables keep their full pages until rewritten (`VACUUM FULL
watches_listing` in a quiet hour); new pages get the room at once. SQLite has no fill
factor: there the migration only drops the index (one index fewer to rewrite per update)."""

from django.db import migrations


def fill_factor(value: int):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE watches_listing SET (fillfactor = {value})")

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("watches", "0009_listing_stats_at"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="listing", name="listing_poll_due"),
        migrations.RunPython(fill_factor(80), fill_factor(100)),
    ]
