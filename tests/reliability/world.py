"""Helpers of the reliability suite: a world of subscribed devices, watches and due outbox
rows built in bulk, and Yasugoro processes (dispatchers, qclusters) started against the test
database with the settings they would get in production — from the environment."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db.models import Count
from django.utils import timezone
from django_q.brokers.redis_broker import Redis as RedisBroker

from demo.models import DemoProduct
from outbox.enqueue import Detection, enqueue_many
from outbox.models import TERMINAL, Outbox, OutboxEvent, Status
from tests.fakes.push_service import FakePushService, b64url
from watches.models import Channel, Device, Listing, Trigger, Watch

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "run_dispatcher.py"


@dataclass
class World:
    devices: list[Device] = field(default_factory=list)
    listings: list[Listing] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)


def subscribed_devices(push_service: FakePushService, count: int) -> list[Device]:
    devices = []
    for _ in range(count):
        subscriber = push_service.new_subscriber()
        devices.append(
            Device(
                token_hash=secrets.token_hex(32),
                channel=Channel.WEBPUSH,
                language="en",
                push_endpoint=subscriber.endpoint,
                push_p256dh=subscriber.p256dh,
                push_auth=b64url(subscriber.auth),
                push_active=True,
                push_subscribed_at=timezone.now(),
            )
        )
    return Device.objects.bulk_create(devices)


def demo_listings(count: int, *, price: int = 900) -> list[Listing]:
    tag = secrets.token_hex(3)
    codes = [f"rel-{tag}-{i}" for i in range(count)]
    DemoProduct.objects.bulk_create(
        DemoProduct(item_code=code, name=f"reliability item {code}", price=price) for code in codes
    )
    return Listing.objects.bulk_create(
        Listing(source="demo", item_code=code, name=f"reliability item {code}", price=price)
        for code in codes
    )


def due_rows(devices: list[Device], listings: list[Listing], count: int) -> list[int]:
    """`count` watches (target ¥950 on listings at ¥900), each with one due outbox row
    enqueued through the real door. Returns the new rows' ids."""
    watches = Watch.objects.bulk_create(
        (
            Watch(
                device=devices[i % len(devices)],
                listing=listings[i % len(listings)],
                trigger=Trigger.TARGET_PRICE,
                target_price=950,
            )
            for i in range(count)
        ),
        batch_size=500,
    )
    now = timezone.now()
    detections = [
        Detection(
            watch_id=w.pk,
            device_id=w.device_id,
            channel=Channel.WEBPUSH,
            trigger=Trigger.TARGET_PRICE,
            detected_at=now,
            payload={"price": 900, "effective_price": 900, "line": "950"},
        )
        for w in watches
    ]
    assert enqueue_many(detections) == count
    return list(
        Outbox.objects.filter(watch__in=[w.pk for w in watches])
        .order_by("id")
        .values_list("id", flat=True)
    )


def database_url() -> str:
    """The test database as a DATABASE_URL a child process can use."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


def child_env(**extra: object) -> dict[str, str]:
    """The environment of a Yasugoro process pointed at this test run: the test database, the
    test settings, the fake push service on the allowlist (PUSH_SERVICE_HOSTS, as production
    reads it), quiet logs."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "yasugoro.settings_test",
        "PUSH_SERVICE_HOSTS": ",".join(settings.PUSH_SERVICE_HOSTS),
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("REDIS_URL", None)
    env.update({key: str(value) for key, value in extra.items()})
    return env


class RedisQueue(RedisBroker):
    """django-q2's Redis broker, on our Redis database whatever this process's Q_CLUSTER
    says (the test process itself runs on the ORM broker)."""

    def __init__(self, url: str) -> None:
        self._url = url
        super().__init__(list_key="yasugoro")

    def get_connection(self, list_key: str | None = None):
        return redis.from_url(self._url)


def redis_database(server: str, db: int) -> Iterator[str]:
    """For a fixture: the URL of Redis database `db` on `server`, flushed before and after;
    the test is skipped with a reason when no Redis answers."""
    url = f"{server}/{db}"
    client = redis.from_url(url, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"needs Redis at {server} ({type(exc).__name__}); CI starts one")
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def start_cluster(env: dict[str, str], logs: Path, name: str) -> subprocess.Popen:
    """A `manage.py qcluster` in a session of its own (`stop` can end all its processes)."""
    with open(logs / f"{name}.log", "w") as out:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_dispatcher(
    env: dict[str, str], logs: Path, name: str, *, ready: Path, go: Path, passes: int = 1
) -> subprocess.Popen:
    """A dispatcher process (`run_dispatcher.py`): it touches `ready` once set up and starts
    when `go` exists; with `passes`, it touches `<ready>-<k>` after pass k and starts pass
    k + 1 when `<go>-<k + 1>` exists."""
    with open(logs / f"{name}.log", "w") as out:  # the child keeps its own copy
        return subprocess.Popen(
            [
                *(sys.executable, str(RUNNER), "--ready", str(ready), "--go", str(go)),
                *(("--passes", str(passes)) if passes > 1 else ()),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(paths: list[Path], procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        dead = [proc.args for proc in procs if proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise AssertionError(f"processes never got ready (dead: {dead})")
        time.sleep(0.01)


def stop(proc: subprocess.Popen, *, timeout: float = 15.0) -> None:
    """SIGTERM the process and wait; SIGKILL its whole session if it does not stop."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def log_tail(logs: Path, name: str, lines: int = 30) -> str:
    path = logs / f"{name}.log"
    return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""


def statuses(rows: list[int]) -> Counter[str]:
    counts = Outbox.objects.filter(id__in=rows).values("status").annotate(n=Count("id"))
    return Counter({c["status"]: c["n"] for c in counts})


def not_terminal(rows: list[int]) -> int:
    return Outbox.objects.filter(id__in=rows).exclude(status__in=list(TERMINAL)).count()


def dispatcher_processes(rows: list[int]) -> set[str]:
    """host:pid of every dispatcher that recorded a claim of these rows."""
    actors = OutboxEvent.objects.filter(
        outbox_id__in=rows, to_status=Status.SENDING, reason="claimed"
    ).values_list("actor", flat=True)
    return {actor.rsplit(":", 1)[0] for actor in actors.distinct()}
