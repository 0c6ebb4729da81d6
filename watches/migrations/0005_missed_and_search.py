"""Search that finds what people type (a search text per listing and its substring index),
indexes for the home page's order, and the watch's "we would have told you" fields.

Works on an existing database: the search text of every listing already there is computed
here, then the index is built over it (SQLite FTS5 trigram; PostgreSQL pg_trgm GIN)."""

from django.db import migrations, models


def fill_search_text(apps, schema_editor):
    # The same function as Listing.save(): the historical model has no save() override.
    from watches.search.text import for_listing

    # The database being migrated, which need not be the default one.
    listings = apps.get_model("watches", "Listing").objects.using(schema_editor.connection.alias)
    batch = []
    for listing in listings.only("id", "name", "category").iterator(chunk_size=2000):
        listing.search_text = for_listing(listing.name, listing.category)
        batch.append(listing)
        if len(batch) >= 2000:
            listings.bulk_update(batch, ["search_text"])
            batch.clear()
    listings.bulk_update(batch, ["search_text"])


def install_index(apps, schema_editor):
    from watches.search.index import install

    install(schema_editor.connection)


def uninstall_index(apps, schema_editor):
    from watches.search.index import uninstall

    uninstall(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('watches', '0004_demoproduct_moves_to_demo'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='listing',
            name='listing_category_name',
        ),
        migrations.AddField(
            model_name='listing',
            name='search_text',
            field=models.TextField(blank=True, default='', editable=False),
        ),
        migrations.AddField(
            model_name='watch',
            name='missed_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='watch',
            name='missed_price',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name='listing',
            index=models.Index(condition=models.Q(('paused', False)), fields=['name', 'id'], name='listing_browse'),
        ),
        migrations.AddIndex(
            model_name='listing',
            index=models.Index(condition=models.Q(('paused', False)), fields=['category', 'name', 'id'], name='listing_category_browse'),
        ),
        migrations.RunPython(fill_search_text, migrations.RunPython.noop),
        migrations.RunPython(install_index, uninstall_index),
    ]
