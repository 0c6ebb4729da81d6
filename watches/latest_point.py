"""Each listing's latest price point, kept on its own row by the database.

`Listing.point_at`, `point_price`, `point_shipping` and `point_in_stock` are the listing's latest
price point — by `observed_at`, then id, as a seek down the (listing, observed_at) index would
find it. Triggers on the price points' table keep them for every writer of history: polls and
re-fetches (`watches.observations`), a listing added by link, the demo seed, staff in admin,
retention's deletes, a test's factory, a bench's raw SQL. Code cannot forget to.

- a point inserted at or after the kept one becomes it (a tie goes to the later insert, the
  higher id, as the seek orders);
- deleting the kept point (or any point at its time or later), or updating any point, derives
  the listing's from the history again — none left is NULL.

The observation rule reads them under the listings' locks (`observations._still_worth_writing`)
instead of seeking the history index once per listing: on SQLite 7 → 2 µs a listing, the step
of a dispatcher's re-fetch that grew most with the number of listings.

SQLite has row triggers only; PostgreSQL's are per statement over transition tables, so a batch
of 500 points is one UPDATE, not 500 calls of a function.

`install()` creates whatever trigger is missing and, when it did, derives every listing's point
from the history (a trigger missing meanwhile may have let writes by). The migration calls it,
and so does every `migrate` afterwards (post_migrate): on SQLite, Django rebuilds a table to alter
it and its triggers go with the old table.
"""

# ruff: noqa: S608 — literal SQL over the models' own table and column names, nothing else
from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

_COLUMNS = "point_at, point_price, point_shipping, point_in_stock"
_LATEST_OF = (
    "SELECT p.observed_at, p.price, p.shipping, p.in_stock FROM watches_pricepoint p "
    "WHERE p.listing_id = {listing} ORDER BY p.observed_at DESC, p.id DESC LIMIT 1"
)
_DERIVE_ALL = (
    f"UPDATE watches_listing SET ({_COLUMNS}) = ("
    + _LATEST_OF.format(listing="watches_listing.id")
    + ")"
)

_SQLITE = {
    "watches_pricepoint_latest_ai": """CREATE TRIGGER watches_pricepoint_latest_ai
        AFTER INSERT ON watches_pricepoint BEGIN
        UPDATE watches_listing SET point_at = new.observed_at, point_price = new.price,
            point_shipping = new.shipping, point_in_stock = new.in_stock
        WHERE id = new.listing_id AND (point_at IS NULL OR point_at <= new.observed_at);
        END""",
    "watches_pricepoint_latest_ad": f"""CREATE TRIGGER watches_pricepoint_latest_ad
        AFTER DELETE ON watches_pricepoint
        WHEN old.observed_at >= (SELECT point_at FROM watches_listing WHERE id = old.listing_id)
        BEGIN
        UPDATE watches_listing SET ({_COLUMNS}) = ({_LATEST_OF.format(listing="old.listing_id")})
        WHERE id = old.listing_id;
        END""",
    "watches_pricepoint_latest_au": f"""CREATE TRIGGER watches_pricepoint_latest_au
        AFTER UPDATE ON watches_pricepoint BEGIN
        UPDATE watches_listing SET ({_COLUMNS}) =
            ({_LATEST_OF.format(listing="watches_listing.id")})
        WHERE id IN (old.listing_id, new.listing_id);
        END""",
}

_PG_FUNCTIONS = {
    "watches_pricepoint_latest_ai": """
        UPDATE watches_listing l SET point_at = a.observed_at, point_price = a.price,
            point_shipping = a.shipping, point_in_stock = a.in_stock
        FROM (SELECT DISTINCT ON (listing_id) listing_id, observed_at, price, shipping, in_stock
              FROM added ORDER BY listing_id, observed_at DESC, id DESC) a
        WHERE l.id = a.listing_id AND (l.point_at IS NULL OR l.point_at <= a.observed_at);""",
    "watches_pricepoint_latest_ad": f"""
        UPDATE watches_listing l SET ({_COLUMNS}) = ({_LATEST_OF.format(listing="l.id")})
        FROM (SELECT listing_id, MAX(observed_at) AS latest FROM removed GROUP BY listing_id) r
        WHERE l.id = r.listing_id AND l.point_at <= r.latest;""",
    "watches_pricepoint_latest_au": f"""
        UPDATE watches_listing l SET ({_COLUMNS}) = ({_LATEST_OF.format(listing="l.id")})
        WHERE l.id IN (SELECT listing_id FROM removed UNION SELECT listing_id FROM added);""",
}
_PG_EVENTS = {
    "watches_pricepoint_latest_ai": ("INSERT", "NEW TABLE AS added"),
    "watches_pricepoint_latest_ad": ("DELETE", "OLD TABLE AS removed"),
    "watches_pricepoint_latest_au": ("UPDATE", "OLD TABLE AS removed NEW TABLE AS added"),
}


def install(connection: BaseDatabaseWrapper) -> bool:
    """Create the triggers where missing and, when one was, derive every listing's latest
    point from the history. True when something was (re)created."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
                ["watches_pricepoint"],
            )
            present = {name for (name,) in cursor.fetchall()}
            missing = [name for name in _SQLITE if name not in present]
            for name in missing:
                cursor.execute(_SQLITE[name])
        elif connection.vendor == "postgresql":
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'watches_pricepoint'::regclass"
            )
            present = {name for (name,) in cursor.fetchall()}
            missing = [name for name in _PG_FUNCTIONS if name not in present]
            for name in missing:
                event, referencing = _PG_EVENTS[name]
                cursor.execute(
                    f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                    f"$$ BEGIN {_PG_FUNCTIONS[name]} RETURN NULL; END $$"
                )
                cursor.execute(
                    f"CREATE TRIGGER {name} AFTER {event} ON watches_pricepoint "
                    f"REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
                )
        else:
            return False
        if missing:
            # Whatever was written while a trigger was missing is accounted for now.
            cursor.execute(_DERIVE_ALL)
    return bool(missing)


def uninstall(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        for name in _PG_FUNCTIONS if connection.vendor == "postgresql" else _SQLITE:
            if connection.vendor == "postgresql":
                cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON watches_pricepoint")
                cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")
            else:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
