"""Every listing's search text written again: it now carries each part in its loose form too
(near misses: `watches.search.text.loose`), and the pet categories' words changed
(`watches.search.vocabulary`). Only texts that differ are written; the index follows them
(SQLite's triggers, PostgreSQL's GIN index)."""

from django.db import migrations


def refresh_search_text(apps, schema_editor):
    # The same function as Listing.save(): the historical model has no save() override.
    from watches.search.text import for_listing

    # The database being migrated, which need not be the default one.
    listings = apps.get_model("watches", "Listing").objects.using(schema_editor.connection.alias)
    batch = []
    for listing in listings.only("id", "name", "category", "search_text").iterator(2000):
        text = for_listing(listing.name, listing.category)
        if text != listing.search_text:
            listing.search_text = text
            batch.append(listing)
        if len(batch) >= 2000:
            listings.bulk_update(batch, ["search_text"])
            batch.clear()
    listings.bulk_update(batch, ["search_text"])


class Migration(migrations.Migration):
    dependencies = [
        ("watches", "0016_marketplace_halt"),
    ]

    operations = [
        migrations.RunPython(refresh_search_text, migrations.RunPython.noop),
    ]
