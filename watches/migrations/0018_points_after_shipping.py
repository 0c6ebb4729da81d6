"""Points: what everyone gets (and what only premium members get) on each listing as last
seen, with its campaign's end; the points of each history point (nullable: the points kept
before are counted as none, and the largest table is not rebuilt); the 90-day low and typical
price after points; a watch's choice to judge after points (False for the watches made before,
which keep judging as they did); a device's word that it is an LYP premium member.

Before this migration no point was read, so the statistics after points are those incl.
shipping: copied, not recomputed."""

from django.db import migrations, models
from django.db.models import F


def copy_statistics(apps, schema_editor):
    Listing = apps.get_model("watches", "Listing")
    Listing.objects.using(schema_editor.connection.alias).update(
        typical_net=F("typical_price"), low_90_net=F("low_90")
    )


class Migration(migrations.Migration):

    dependencies = [
        ('watches', '0017_search_text_near_forms'),
    ]

    operations = [
        migrations.AddField(
            model_name='device',
            name='lyp_premium',
            field=models.BooleanField(default=False, verbose_name='LYP premium member'),
        ),
        migrations.AddField(
            model_name='listing',
            name='low_90_net',
            field=models.PositiveIntegerField(blank=True, help_text='Lowest price after points, last 90 days', null=True, verbose_name='90-day low after points'),
        ),
        migrations.AddField(
            model_name='listing',
            name='member_points',
            field=models.PositiveIntegerField(default=0, help_text='On top, for premium members only (LYP premium)', verbose_name='member-only points'),
        ),
        migrations.AddField(
            model_name='listing',
            name='point_rate',
            field=models.PositiveSmallIntegerField(blank=True, null=True, verbose_name='point multiplier'),
        ),
        migrations.AddField(
            model_name='listing',
            name='points',
            field=models.PositiveIntegerField(default=0, help_text='What everyone gets now, 1 pt = ¥1', verbose_name='points'),
        ),
        migrations.AddField(
            model_name='listing',
            name='points_after',
            field=models.PositiveIntegerField(blank=True, null=True, verbose_name='points after the campaign'),
        ),
        migrations.AddField(
            model_name='listing',
            name='points_until',
            field=models.DateTimeField(blank=True, help_text="The campaign's end", null=True, verbose_name='points until'),
        ),
        migrations.AddField(
            model_name='listing',
            name='typical_net',
            field=models.PositiveIntegerField(blank=True, help_text='Median price after points, last 30 days', null=True, verbose_name='typical price after points'),
        ),
        migrations.AddField(
            model_name='pricepoint',
            name='points',
            field=models.PositiveIntegerField(blank=True, null=True, verbose_name='points'),
        ),
        migrations.AddField(
            model_name='watch',
            name='after_points',
            field=models.BooleanField(default=False, verbose_name='after points'),
        ),
        migrations.RunPython(copy_statistics, migrations.RunPython.noop, elidable=True),
    ]
