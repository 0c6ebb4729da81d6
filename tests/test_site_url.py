"""Every mail links where the site is served: `make run PORT=8120` gives its address to both
processes that send mail and records it for a command run by hand; a mail the dispatcher
builds carries it in every link; production without a usable address does not start; a
request at another address than SITE_URL's is warned about once."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings
from django.utils.timezone import now

from demo.market import set_product
from outbox.enqueue import Detection, enqueue_many
from outbox.models import Outbox, Status
from tests.factories import EmailDeviceFactory, ListingFactory, WatchFactory
from tests.fakes.smtp_server import text_and_html
from watches.models import Channel
from yasugoro.site_url import origin, site_url

ROOT = Path(__file__).resolve().parent.parent
SERVED = "http://127.0.0.1:8120"


def make_run_dry(*args: str) -> list[str]:
    """The lines `make run …` would run (make -n runs none of them)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "YASUGORO_VAR_DIR")}
    done = subprocess.run(
        ["make", "-n", "run", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_make_run_gives_its_address_to_the_web_server_and_the_cluster_and_records_it():
    lines = make_run_dry("PORT=8120")
    qcluster = next(line for line in lines if "manage.py qcluster" in line)
    runserver = next(line for line in lines if "manage.py runserver" in line)
    assert f"SITE_URL={SERVED} " in qcluster
    assert f"SITE_URL={SERVED} " in runserver and "runserver 127.0.0.1:8120" in runserver
    assert any(f'echo "{SERVED}" > "var/site_url"' in line for line in lines)


def test_make_run_on_every_address_links_to_this_machine_unless_told_otherwise():
    lines = make_run_dry("HOST=0.0.0.0", "PORT=8001")
    assert any("SITE_URL=http://127.0.0.1:8001 " in line for line in lines)
    lines = make_run_dry("HOST=0.0.0.0", "SITE_URL=http://laptop.local:8000")
    assert any("SITE_URL=http://laptop.local:8000 " in line for line in lines)


def settings_in_a_fresh_process(
    tmp_path: Path, printed: str = "settings.SITE_URL", **env: str
) -> str:
    """What `printed` says of the settings a process started with `env` (and `VAR_DIR`
    `tmp_path`) reads."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SITE_URL", "DEBUG", "DJANGO_SETTINGS_MODULE", "ALLOWED_HOSTS")
    }
    environ.update(YASUGORO_VAR_DIR=str(tmp_path), VAPID_SUBJECT="mailto:a@yasugoro.example")
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", f"from yasugoro import settings; print({printed})"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_command_run_by_hand_beside_make_run_links_where_it_serves(tmp_path):
    assert settings_in_a_fresh_process(tmp_path, DEBUG="1") == "http://127.0.0.1:8000"
    (tmp_path / "site_url").write_text(SERVED + "\n")  # as `make run PORT=8120` leaves it
    assert settings_in_a_fresh_process(tmp_path, DEBUG="1") == SERVED
    # The environment wins; production never reads the development record.
    assert settings_in_a_fresh_process(tmp_path, DEBUG="1", SITE_URL="http://x:1/") == "http://x:1"
    production = settings_in_a_fresh_process(tmp_path, DEBUG="0", ALLOWED_HOSTS="shop.example")
    assert production == "https://shop.example"


@pytest.mark.parametrize("hosts", [["*"], [".yasugoro.example"], []])
def test_production_without_site_url_and_no_host_to_derive_it_from_does_not_start(hosts):
    with pytest.raises(ImproperlyConfigured, match=r"SITE_URL .* is required"):
        site_url("", recorded="", debug=False, allowed_hosts=hosts)


def test_a_bad_site_url_does_not_start():
    with pytest.raises(ImproperlyConfigured, match="SITE_URL must be"):
        site_url("127.0.0.1:8120", recorded="", debug=True, allowed_hosts=[])


@pytest.mark.django_db
@override_settings(SITE_URL=SERVED)
def test_every_link_of_a_mail_the_dispatcher_builds_points_at_site_url(smtp_server):
    device = EmailDeviceFactory()
    listing = ListingFactory(price=1000)
    watch = WatchFactory(device=device, listing=listing, target_price=1200)
    snapshot = {"value": "1000", "line": "1200", "price": 1000}
    enqueue_many([Detection(watch.pk, device.pk, Channel.EMAIL, watch.trigger, now(), snapshot)])
    row = Outbox.objects.get(watch=watch)
    set_product(listing.item_code, price=980)

    call_command("dispatch_outbox")

    row.refresh_from_db()
    assert row.status == Status.SENT, (row.reason, row.detail)
    [mail] = smtp_server.messages()
    unsubscribe = re.fullmatch(r"<([^>]+)>", mail["List-Unsubscribe"].strip()).group(1)
    assert unsubscribe.startswith(f"{SERVED}/email/unsubscribe/")
    text, html = text_and_html(mail)
    links = set(re.findall(r"https?://[^\s\"<>]+", text + html))
    ours = {link for link in links if "127.0.0.1" in link or "testserver" in link}
    assert f"{SERVED}/listings/{listing.pk}/" in ours
    assert f"{SERVED}/settings/" in ours and unsubscribe in ours
    assert all(link.startswith(SERVED + "/") for link in ours), ours


@pytest.mark.django_db
@override_settings(SITE_URL=SERVED, ALLOWED_HOSTS=["127.0.0.1", "localhost"])
def test_a_request_at_another_address_than_site_url_is_warned_about_once(client, caplog):
    with caplog.at_level(logging.WARNING, logger="yasugoro.site_url"):
        client.get("/", HTTP_HOST="127.0.0.1:8120")
        assert caplog.records == []
        client.get("/", HTTP_HOST="localhost:8120")
        client.get("/settings/", HTTP_HOST="localhost:8120")
    [warning] = caplog.records
    assert "reached at http://localhost:8120, but SITE_URL is http://127.0.0.1:8120" in (
        warning.getMessage()
    )


@pytest.mark.django_db
@override_settings(SITE_URL=SERVED, ALLOWED_HOSTS=["127.0.0.1", "localhost"])
def test_requests_naming_a_new_port_each_cannot_flood_the_log(client, caplog):
    """ALLOWED_HOSTS does not look at the port: a request per port would be a warning (and a
    remembered address) each."""
    from yasugoro.site_url import WARNED_ADDRESSES

    with caplog.at_level(logging.WARNING, logger="yasugoro.site_url"):
        for port in range(9000, 9040):
            client.get("/no-such-page/", HTTP_HOST=f"localhost:{port}")
    ours = [record for record in caplog.records if record.name == "yasugoro.site_url"]
    assert len(ours) == WARNED_ADDRESSES + 1
    assert "no more of them are logged" in ours[-1].getMessage()


def test_an_origin_leaves_out_the_default_port():
    assert origin("https://Shop.Example:443") == "https://shop.example"
    assert origin("http://127.0.0.1:8120") == "http://127.0.0.1:8120"
