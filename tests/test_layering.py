"""Each app owns its tables, and the layering says so: the import-linter contracts of
pyproject.toml hold (and do catch a forbidden import), and a real dispatch cycle writes the
domain's tables only from `watches` code — checked on the SQL the database receives."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from django.db import connection

from demo.models import DemoProduct
from outbox.dispatch import run_cycle
from outbox.models import Outbox, Reason, Status
from tests.factories import ListingFactory, SubscribedDeviceFactory, WatchFactory
from tests.fakes.push_service import b64url
from tests.outbox_helpers import enqueue_for
from watches.models import Device, Listing, PricePoint, Watch

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("common", "outbox", "watches", "yasugoro", "demo", "monitoring")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", "pyproject.toml"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract", "offence"),
    [
        (
            "outbox/retries.py",
            "from watches.polling.observations import observe",
            "outbox reaches watches only through the modules watches exposes for it",
            "outbox.retries -> watches.polling.observations",
        ),
        (
            "outbox/recording.py",
            "from watches.polling.poll import poll",
            "outbox reaches watches only through the modules watches exposes for it",
            "outbox.recording -> watches.polling.poll",
        ),
        (
            "watches/units.py",
            "from outbox.models import Status",
            "watches reaches outbox only through outbox.enqueue",
            "watches.units -> outbox.models",
        ),
        (
            "common/text.py",
            "from watches.models import Listing",
            "common imports neither app nor the project",
            "common.text -> watches.models",
        ),
        (
            "common/counters.py",
            "from outbox.models import Status",
            "common imports neither app nor the project",
            "common.counters -> outbox.models",
        ),
    ],
)
def test_the_contracts_catch_a_forbidden_import(tmp_path, module, line, contract, offence):
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / module).open("a") as source:
        source.write(f"\n{line}  # noqa\n")

    run = lint_imports(tmp_path)

    assert run.returncode != 0
    assert f"{contract} BROKEN" in run.stdout
    assert offence in run.stdout


# --- writes, at the SQL level -------------------------------------------------------------

_WRITE = re.compile(
    r'^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?(?P<table>watches_\w+)"?', re.IGNORECASE
)
# common/ is left out like any library: its helpers write for whichever app calls them.
_APPS = tuple(str(ROOT / package) + "/" for package in ("outbox", "watches", "yasugoro"))


def _issuer() -> str:
    """The innermost frame of an app's code (not a test, not a library) on the stack."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(_APPS):
            return str(Path(frame.filename).relative_to(ROOT))
    return "?"


@pytest.mark.django_db
def test_a_dispatch_cycle_writes_the_domains_tables_only_from_watches_code(push_service):
    """A cycle that sends one row, drops one `subscription_gone` and one `out_of_stock`,
    with every INSERT, UPDATE and DELETE on a watches_* table recorded with the code that
    issued it."""
    receiving, gone = push_service.new_subscriber(), push_service.new_subscriber()
    del push_service.subscribers[gone.id]  # the push service no longer knows it: 404

    def watch_for(subscriber, **listing):
        device = SubscribedDeviceFactory(
            push_endpoint=subscriber.endpoint,
            push_p256dh=subscriber.p256dh,
            push_auth=b64url(subscriber.auth),
        )
        return WatchFactory(
            device=device, listing=ListingFactory(price=900, **listing), target_price=950
        )

    sent, dropped_gone = watch_for(receiving), watch_for(gone)
    sold_out = WatchFactory(listing=ListingFactory(price=900), target_price=950)
    DemoProduct.objects.filter(item_code=sold_out.listing.item_code).update(in_stock=False)
    rows = {enqueue_for(watch).pk: watch for watch in (sent, dropped_gone, sold_out)}

    writes: list[tuple[str, str]] = []

    def record(execute, sql, params, many, context):
        match = _WRITE.match(sql)
        if match:
            writes.append((match["table"], _issuer()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run_cycle()

    outcomes = dict(Outbox.objects.filter(pk__in=rows).values_list("watch_id", "reason"))
    assert outcomes == {
        sent.pk: Reason.DELIVERED,
        dropped_gone.pk: Reason.SUBSCRIPTION_GONE,
        sold_out.pk: Reason.OUT_OF_STOCK,
    }
    # The cycle did change the domain: history, listings, a baseline, a subscription…
    assert {table for table, _ in writes} >= {
        PricePoint._meta.db_table,
        Listing._meta.db_table,
        Watch._meta.db_table,
        Device._meta.db_table,
    }
    assert Watch.objects.get(pk=sent.pk).last_notified_at is not None
    assert Device.objects.get(pk=dropped_gone.device_id).push_active is False
    # …and every one of those writes came from watches' own code.
    assert [w for w in writes if not w[1].startswith("watches/")] == []
    assert Outbox.objects.filter(status=Status.SENT).count() == 1
