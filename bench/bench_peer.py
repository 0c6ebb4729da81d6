"""Against the peer, the same work: 10,000 notification mails through our dispatcher's e-mail
channel and through django-post-office's `send_queued_mail`, templated and plain, every mail
through Django's locmem mail backend, in the same run, on SQLite and PostgreSQL.

Three sides, each sending the same 10,000 mails (one to each of 10,000 addresses: every
watcher has one notification due, so no digest forms and every notification is one mail):

- ours: one dispatcher cycle (`outbox.dispatch.run_cycle`) over 10,000 due e-mail rows —
  claims with a fence, guards, a re-fetch of every watched listing on the path production
  takes: the Rakuten adapter over HTTP to a fake Ichiba on 127.0.0.1 (bench/_ichiba.py: it
  checks the path, the key and the parameters, and answers 429 to a request of the id beyond
  its allowance in one wall-clock second), through the id's rate limiter (the process's own,
  as without Redis). The listings are offers of products, 20 shops each: a batch's rows on
  offers of one product are answered by one page of the product's offers
  (`watches.products.refetch`). Each listing is as the poll that detected its rows left it
  two minutes before — too old to reuse, so every run asks again — and the answers are kept by
  the observation rule (nothing changed: no price point). Then the re-check, the message in
  the device's language, the lease's intent; the e-mail channel renders the two notification
  templates, signs the unsubscribe link and builds the mail; the backend turns it into MIME;
  then the outcomes, events and the watches' baselines are recorded;
- post-office, templated: 10,000 queued mails with a template (the source of our two
  notification templates and a subject line) and a JSON context, rendered at delivery
  (`render_on_delivery`): its `send_queued_mail_until_done` — what `manage.py
  send_queued_mail` runs — with its defaults (batches of 100, 5 threads, a log row per sent
  mail, its lock file) compiles and renders the three templates, builds the mail, sends it,
  marks the batch sent and writes the log rows;
- post-office, plain: the same with the subject, text and HTML stored when queued.

The post-office mails are made from the mails our first (unmeasured) cycle built: the same
recipients, subject, text and HTML parts, and headers (Message-ID, List-Unsubscribe…). After
every run the bench checks that each side delivered those very mails, and after each of ours
that every listing was asked again.

The allowance (WORLDS). 100 listings are re-checked at Rakuten's own 1 request/s: a batch
holds at most 15 re-checks (`recheck_capacity`: half of what the id answers within
OUTBOX_REFETCH_MAX_AGE), a product's offers counting as one, so a run is 20 batches and 5
requests (a page of offers a product), and 4 s of a run's 13-15 is the wait for the
allowance. The 6,667 listings are offers of 334 products: at 1 request/s a run would wait
some 334 s for their pages, so they are re-checked at 34 requests/s, the fake's allowance
raised with the id's. The code path is the same, the allowance larger. The comparison is CPU for the
same mails; the wall figures are printed too, with the limiter's wait (what its `acquire`
waited, summed) and our rate without it. The fake runs in a process of its own (a
marketplace's work is not our CPU); the bench prints the requests of each run, the most
requests of the id in one wall-clock second and how many the fake refused (429) — which must
be none.

All three share one database the bench makes: a SQLite file (WAL, as the project configures
it) in var/, and a PostgreSQL database `yasugoro_bench_peer_*` it creates on $BENCH_PG_URL and
drops at exit (skipped with a message when no server answers). One child process per database
and world: 100 listings (100 watches a listing: the re-fetch is a small share of a mail) and
6,667 (1–2 watches a listing). Within a child each measurement round runs the
three sides in turn over the same rows, reset between runs, starting one side later each
time; printed are medians and the median of the per-round ratios, wall and CPU (this process,
all threads). On SQLite that includes the database's work; on PostgreSQL the server's
processes do it outside the figure — ours writes more (claims, events, baselines),
post-office opens a new connection for every batch of 100.

post-office is a bench-only requirement (bench/requirements-bench.txt): when it is missing,
the bench installs it into var/bench-packages/site-packages (the project's venv stays as it
is), or says why it cannot and skips.

    .venv/bin/python bench/bench_peer.py [ROWS] [ROUNDS] [LISTINGS[@RATE],…]  # 10000 3 100,6667
    .venv/bin/python bench/bench_peer.py --profile [ROWS]                     # 2000

A world given without a rate takes its rate in WORLDS, else Rakuten's 1 request/s.

`--profile` runs ours and post-office's templated mail once each under cProfile (CPU time),
on SQLite with 100 listings at 1 request/s, and prints where each spends it. Our deliveries
then run in the cycle's own thread (OUTBOX_DELIVERY_WORKERS=1) so the profile sees them;
post-office's run in its pool's threads, which cProfile does not follow: its profile shows the
rest (reading the queue, compiling and rendering the templates, the bookkeeping).
"""

from __future__ import annotations

import atexit
import cProfile
import datetime as dt
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Named site-packages: mypy's walk of the checkout (`make lint`) passes over a folder of that
# name, as it does a venv's, and post-office's own sources are not the project's to check.
PACKAGES = ROOT / "var" / "bench-packages" / "site-packages"
REQUIREMENTS = Path(__file__).resolve().parent / "requirements-bench.txt"
ROWS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
# The worlds: (listings, the Rakuten id's allowance in requests a second). 100 listings at
# Rakuten's own 1 request/s: 5 products, 5 pages a run. 6,667 at 34: their 334 products' pages
# would make a run wait some 334 s at 1 request/s, and the bench would measure the wait. The
# code path is the same, the allowance larger.
WORLDS = ((100, 1), (6_667, 34))
# 90 days of history, two points a day: what the re-fetch's observation rule reads and keeps.
HISTORY_DAYS, POINTS_PER_DAY = 90, 2
SIDES = ("ours", "templated", "plain")
LABELS = {
    "ours": "ours (dispatch cycle, e-mail)",
    "templated": "post-office, templated",
    "plain": "post-office, plain",
}
# The subject of the post-office template: what the e-mail channel puts in a mail's subject.
SUBJECT_TEMPLATE = "{{ message.title }} — {{ message.body }}"


# --- the bench (no Django) ---------------------------------------------------------------


def post_office_ready() -> bool:
    """Whether post-office imports from PACKAGES, installing it there first."""
    # Found, not imported: post-office reads Django's settings as it is imported.
    check = [sys.executable, "-c", "import importlib.util as u; assert u.find_spec('post_office')"]
    env = {**os.environ, "PYTHONPATH": str(PACKAGES)}
    if subprocess.run(check, env=env, capture_output=True).returncode == 0:
        return True
    print(f"installing {REQUIREMENTS.name} into {PACKAGES.relative_to(ROOT)} …", flush=True)
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",  # pinned in the file; the venv's Django is the one both sides use
        "--target",
        str(PACKAGES),
        "-r",
        str(REQUIREMENTS),
    ]
    done = subprocess.run(install, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr.strip()[-2000:])
        return False
    return subprocess.run(check, env=env, capture_output=True).returncode == 0


def main(profiling: bool = False) -> None:
    from _setup import postgres_available

    if not post_office_ready():
        print(f"SKIPPED: django-post-office could not be installed from {REQUIREMENTS.name}")
        return
    worlds: tuple[tuple[int, int], ...] = WORLDS
    if len(sys.argv) > 3:
        # LISTINGS or LISTINGS@RATE; a count without a rate takes its world's, else 1/s.
        rates = dict(WORLDS)
        worlds = tuple(
            (int(count), int(rate) if rate else rates.get(int(count), 1))
            for count, _, rate in (world.partition("@") for world in sys.argv[3].split(","))
        )
    vendors = ["sqlite"] + (["postgresql"] if postgres_available() else [])
    if len(vendors) == 1:
        print("PostgreSQL is not reachable: measuring SQLite only")
    # The mails are in Japanese, as in production, only with the catalogues compiled (they
    # are not in git; `make run` compiles them the same way).
    compile_translations = [sys.executable, str(ROOT / "manage.py"), "compile_translations"]
    subprocess.run(
        compile_translations,
        env={**os.environ, "DEBUG": "1"},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGES), os.environ.get("PYTHONPATH")])),
        "DJANGO_SETTINGS_MODULE": "bench.peer_settings",
        # Production settings (DEBUG would keep a log of every query); each child points
        # Rakuten at its fake Ichiba (`Ichiba`), the demo marketplace off.
        "DEBUG": "0",
        "DEMO_TICK": "0",
        # One dispatcher process: its own limiter is the id's whole budget (with Redis it
        # would be the fleet's, and the caches would move there too).
        "REDIS_URL": "",
        "LOG_LEVEL": "WARNING",
        "VAPID_SUBJECT": "mailto:bench@example.invalid",
        "OUTBOX_CYCLE_SECONDS": "3600",
    }
    if profiling:
        rows = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000
        env["OUTBOX_DELIVERY_WORKERS"] = "1"
        subprocess.run([sys.executable, __file__, "--profile-child", str(rows)], env=env)
        return
    from _ichiba import OFFERS_PER_PRODUCT

    print(
        f"{ROWS:,} mails a side, {ROUNDS} rounds (the sides in turn), medians; "
        f"{HISTORY_DAYS} days × {POINTS_PER_DAY} price points a listing; ours re-checks at "
        f"Rakuten over HTTP (a fake Ichiba in its own process), {OFFERS_PER_PRODUCT} "
        f"listings a product; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    for vendor in vendors:
        for listings, rate in worlds:
            args = ["--child", vendor, str(listings), str(rate), str(ROWS), str(ROUNDS)]
            subprocess.run([sys.executable, __file__, *args], env=env, check=False)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


# --- the fake Ichiba, in a process of its own (no Django) --------------------------------


class Ichiba:
    """A fake Ichiba (bench/_ichiba.py) in a process of its own, stocked with `count` offers:
    its server's work stays out of the measured process's CPU, as a marketplace's does in
    production. `env` is the environment that points Rakuten at it (`rakuten_env`); `counts`
    asks it what it was asked so far."""

    def __init__(self, count: int, rate: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--ichiba", str(count), str(rate)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.env: dict[str, str] = self._answer()

    def counts(self) -> dict[str, int]:
        """`requests` (all it was asked), `too_many` (how many it refused, 429) and `most` (the
        most requests of the id in one wall-clock second)."""
        assert self.process.stdin is not None
        self.process.stdin.write("counts\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # its end of input: it exits
        self.process.wait(timeout=30)

    def _answer(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the fake Ichiba's process ended")
        return json.loads(line)


def serve_ichiba(count: int, rate: int) -> None:
    """The fake Ichiba's process: it writes the environment that points Rakuten at it, then
    what it counted for every line it reads, until its input ends."""
    from _ichiba import APP_ID, rakuten_env, start_ichiba, stock

    fake = start_ichiba(rate)
    stock(fake, count)
    print(json.dumps(rakuten_env(fake, rate)), flush=True)
    for _ in sys.stdin:
        with fake.lock:
            asked, refused = len(fake.requests), fake.too_many
        most = fake.max_per_second().get(APP_ID, 0)
        print(json.dumps({"requests": asked, "too_many": refused, "most": most}), flush=True)
    # The server's thread is a daemon: it ends with the process.


# --- one child: one database, one world (Django) -----------------------------------------


def on_ichiba(vendor: str, listings: int, rate: int) -> tuple[Ichiba, list[float]]:
    """A fake Ichiba holding `listings` offers, and Django on a fresh database of `vendor` with
    Rakuten pointed at it. Returns the fake and what Rakuten's limiter made each request wait
    (`limiter_waits`)."""
    from _setup import django_on_temp_postgres, django_on_temp_sqlite

    ichiba = Ichiba(listings, rate)
    atexit.register(ichiba.process.kill)  # after a failure too; a no-op once it has exited
    os.environ.update(ichiba.env)
    if vendor == "sqlite":
        django_on_temp_sqlite("peer", under=ROOT / "var")
    else:
        django_on_temp_postgres(f"peer_{listings}")
    return ichiba, limiter_waits()


def limiter_waits() -> list[float]:
    """The limiter of Rakuten's id as `limiter_for` makes it in a process without Redis (a
    `RateLimiter` at RAKUTEN_RATE_PER_SECOND), put where the adapter's budget finds it; it also
    notes how long each request waited for its slot, in the list returned — what of our wall
    time is the allowance's."""
    from django.conf import settings

    from watches.marketplaces.ratelimit import RateLimiter, install_limiter

    waits: list[float] = []

    class Noting(RateLimiter):
        def acquire(self, max_wait: float | None = None) -> float | None:
            waited = super().acquire(max_wait)
            if waited is not None:
                waits.append(waited)
            return waited

    rate = settings.RAKUTEN_RATE_PER_SECOND
    install_limiter(f"rakuten:{settings.RAKUTEN_APP_ID}", rate, Noting(rate))
    return waits


def child(vendor: str, listings: int, rate: int, rows: int, rounds: int) -> None:
    from _ichiba import OFFERS_PER_PRODUCT

    ichiba, waits = on_ichiba(vendor, listings, rate)
    folder = Path(os.environ["YASUGORO_VAR_DIR"])
    built, mails = build(listings, rows)
    # As a django-q2 worker does at spawn (outbox.apps): what is loaded stays out of the
    # collector's walks — here for every side, in this one process.
    from common.longlived import freeze_loaded
    from outbox.apps import WORKER_REGISTRIES

    freeze_loaded(["outbox.tasks", "post_office.mail"], WORKER_REGISTRIES)
    asked: list[int] = []  # requests the fake Ichiba got in each of our runs
    waited: list[float] = []  # seconds each of our runs waited for the allowance
    batches: list[int] = []  # batches each of our runs claimed

    def ours_noted() -> tuple[float, float]:
        requests_before, slots_before = ichiba.counts()["requests"], len(waits)
        times = ours(rows, built, mails)
        asked.append(ichiba.counts()["requests"] - requests_before)
        waited.append(sum(waits[slots_before:]))
        batches.append(claimed_batches())
        return times

    runs: dict[str, Callable[[], tuple[float, float]]] = {
        "ours": ours_noted,
        "templated": lambda: peer(folder, True, mails),
        "plain": lambda: peer(folder, False, mails),
    }
    wall: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    for number in range(rounds):
        # Each side goes first in one round of three: none always follows the same other.
        shift = number % len(SIDES)
        for side in SIDES[shift:] + SIDES[:shift]:
            seconds, cpu_seconds = runs[side]()
            wall[side].append(seconds)
            cpu[side].append(cpu_seconds)
    # Our wall time without the limiter's wait: what it would be with an allowance that never
    # made a request wait (the requests themselves stay in).
    unwaited = {**wall, "ours": [w - x for w, x in zip(wall["ours"], waited, strict=True)]}

    def ratio(times: dict[str, list[float]], peer_side: str) -> str:
        # ours ÷ peer in mails per second: the peer's time over ours, per round.
        per_round = [p / o for o, p in zip(times["ours"], times[peer_side], strict=True)]
        rounds_text = ", ".join(f"{r:.2f}" for r in per_round)
        return f"{statistics.median(per_round):.2f}×  (per round: {rounds_text})"

    lines = [
        f"\n{vendor}, {listings:,} listings ({rows / listings:.1f} watches a listing), "
        f"Rakuten's id at {rate} request/s:"
    ]
    for side in SIDES:
        mails_per_second = rows / statistics.median(wall[side])
        cpu_ms = 1000 * statistics.median(cpu[side]) / rows
        lines.append(
            f"  {LABELS[side]:<31} {mails_per_second:>7,.0f} mails/s  {cpu_ms:5.2f} CPU ms a mail"
        )
    for peer_side in ("templated", "plain"):
        for name, times in (("wall", wall), ("CPU", cpu), ("wall less the wait", unwaited)):
            label = f"ours ÷ post-office {peer_side}, {name}:"
            lines.append(f"  {label:<54} {ratio(times, peer_side)}")
    counts = ichiba.counts()
    ichiba.close()
    products = -(-listings // OFFERS_PER_PRODUCT)
    lines += [
        f"  ours' wall {statistics.median(wall['ours']):.1f} s a run, of it "
        f"{statistics.median(waited):.1f} s the limiter's wait for the allowance; "
        f"without it {rows / statistics.median(unwaited['ours']):,.0f} mails/s",
        f"  ours' batches a run: {', '.join(map(str, batches))} (a batch holds at most "
        f"{recheck_cap()} re-checks: a listing's, or a product's offers); "
        f"requests a run: {', '.join(map(str, asked))} "
        f"({products:,} products, {OFFERS_PER_PRODUCT} offers each)",
        f"  the fake Ichiba: {counts['requests']:,} requests in all (the first cycle's too), "
        f"at most {counts['most']} of the id in one wall-clock second, "
        f"{counts['too_many']} refused (429)",
    ]
    print("\n".join(lines), flush=True)
    assert counts["too_many"] == 0, f"the fake Ichiba refused {counts['too_many']} requests"


def claimed_batches() -> int:
    """How many batches the last cycle claimed: a batch's claim events carry its moment."""
    from outbox.models import OutboxEvent, Reason, Status

    claims = OutboxEvent.objects.filter(to_status=Status.SENDING, reason=Reason.CLAIMED)
    return claims.values("at").distinct().count()


def recheck_cap() -> int | None:
    """The most re-checks a batch may have at the id's allowance (None: no cap)."""
    from django.conf import settings

    from watches.services import recheck_capacity

    return recheck_capacity(dt.timedelta(seconds=settings.OUTBOX_REFETCH_MAX_AGE))


# What a profile's summary adds up: (what, [(the end of a file's path, a function in it)]).
PARTS = {
    "ours": [
        ("the e-mail channel, all of it", [("outbox/channels/email.py", "deliver")]),
        ("the two templates", [("django/template/loader.py", "render_to_string")]),
        ("the MIME message", [("django/core/mail/message.py", "message")]),
        ("  of it, the subject's header", [("email/header.py", "encode")]),
        (
            "the links (reverse, signature)",
            [("django/urls/base.py", "reverse"), ("watches/email_address.py", "unsubscribe_token")],
        ),
        ("locmem's copy of each mail", [("copy.py", "deepcopy")]),
        ("the re-fetch, all of it", [("watches/services.py", "refetch_or_reuse")]),
        (
            "  of it, the requests, their JSON",
            [
                ("watches/marketplaces/rakuten.py", "_ask"),
                ("watches/marketplaces/rakuten.py", "read_page"),
            ],
        ),
    ],
    "templated": [
        ("compiling the templates", [("django/template/engine.py", "from_string")]),
        ("rendering them", [("django/template/backends/django.py", "render")]),
    ],
}


def profile(rows: int) -> None:
    """One run of ours and one of post-office's templated mail under cProfile, on CPU time:
    the functions that take most, and the share of the parts in PARTS."""
    listings, rate = WORLDS[0]
    ichiba, _ = on_ichiba("sqlite", listings, rate)
    folder = Path(os.environ["YASUGORO_VAR_DIR"])
    built, mails = build(listings, rows)
    runs = {
        "ours": lambda: ours(rows, built, mails),
        "templated": lambda: peer(folder, True, mails),
    }
    for side, run in runs.items():
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        _, cpu_seconds = run()
        profiler.disable()
        print(f"\n{LABELS[side]}: {1000 * cpu_seconds / rows:.2f} CPU ms a mail, profiled")
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(30)
        # (file, line, function) -> (calls, primitive calls, own time, cumulative, callers)
        # (`Stats.stats` is public in CPython but not in typeshed.)
        cumulative = {key: value[3] for key, value in stats.stats.items()}  # type: ignore[attr-defined]
        for what, functions in PARTS[side]:
            seconds = sum(
                spent
                for (path, _, name), spent in cumulative.items()
                if any(path.endswith(end) and name == function for end, function in functions)
            )
            print(f"  {what:<34} {100 * seconds / cpu_seconds:4.0f} %")
    counts = ichiba.counts()
    ichiba.close()
    print(f"\nthe fake Ichiba: {counts['requests']} requests, {counts['too_many']} refused (429)")


def build(listing_count: int, rows: int) -> tuple[int, dict[str, tuple]]:
    """`listing_count` Rakuten offers at ¥900, as a poll left them, with their history;
    `rows` e-mail devices (their addresses confirmed, Japanese), each with one target-price
    watch (¥950) and its due row;
    one unmeasured dispatch cycle, whose mails become `rows` templated and `rows` plain
    queued post-office mails. Returns the history's last price point and our mails, by
    Message-ID (`_mail`)."""
    from _ichiba import rakuten_offers
    from _world import due_rows, with_history
    from django.core import mail as django_mail
    from django.db import connection
    from django.utils import timezone

    from watches.models import Channel, Device, NotifyVia

    listings = with_history(rakuten_offers(listing_count), HISTORY_DAYS, POINTS_PER_DAY)
    now = timezone.now()
    devices = Device.objects.bulk_create(
        (
            Device(
                token_hash=f"bench-{i}",
                notify_via=NotifyVia.EMAIL,
                email=f"watcher-{i}@example.invalid",
                email_confirmed_at=now,
                language="ja",
            )
            for i in range(rows)
        ),
        batch_size=2000,
    )
    due_rows(devices, listings, rows, Channel.EMAIL)
    with connection.cursor() as cursor:
        cursor.execute("SELECT MAX(id) FROM watches_pricepoint")
        built = cursor.fetchone()[0]
    # Our first cycle: every code path warm, and the mails the post-office rows repeat.
    ours(rows, built, None)
    queue_post_office(django_mail.outbox)
    mails = {_message_id(m): _mail(m) for m in django_mail.outbox}
    with connection.cursor() as cursor:
        # Planner statistics, as PostgreSQL's autovacuum (and on SQLite the daily retention
        # job, for the outbox) keep them in production: without, PostgreSQL plans the due
        # select and the history reads for empty tables.
        cursor.execute("ANALYZE")
    # post-office's first run (a few mails of each kind), so neither side's first measured
    # run pays for loading code.
    for templated in (True, False):
        peer(Path(os.environ["YASUGORO_VAR_DIR"]), templated, mails, only=100)
    return built, mails


def queue_post_office(mails: list) -> None:
    """Each of our `mails` (as the e-mail channel built them) queued twice in post-office:
    with a template of our notification templates' source and the values they show
    (rendered at delivery), and plain."""
    from django.conf import settings
    from django.template.loader import get_template
    from django.urls import reverse
    from post_office import mail as post_office_mail
    from post_office.models import EmailTemplate

    from outbox.models import Outbox

    template = EmailTemplate.objects.create(
        name="notification",
        subject=SUBJECT_TEMPLATE,
        # The Django backend's template object holds the engine's, whose source is the text.
        content=get_template("outbox/email/notification.txt").template.source,  # type: ignore[attr-defined]
        html_content=get_template("outbox/email/notification.html").template.source,  # type: ignore[attr-defined]
    )
    told = dict(Outbox.objects.filter(sent_message__isnull=False).values_list("id", "sent_message"))
    settings_url = settings.SITE_URL + reverse("device-settings")
    queued = []
    for mail in mails:
        told_message = told[int(_message_id(mail).split("-")[1].split("@")[0])]
        assert told_message is not None  # only rows with a sent message were read
        headers = dict(mail.extra_headers)
        every = {"sender": mail.from_email, "recipients": mail.to, "headers": headers}
        context = {
            "message": {"title": told_message["title"], "body": told_message["body"], "data": {}},
            "url": settings.SITE_URL + told_message["url"],
            "unsubscribe_url": headers["List-Unsubscribe"].strip("<>"),
            "settings_url": settings_url,
        }
        queued.append(
            {**every, "template": template, "context": context, "render_on_delivery": True}
        )
        [(html, _)] = mail.alternatives
        queued.append(
            {**every, "subject": mail.subject, "message": mail.body, "html_message": html}
        )
    post_office_mail.send_many(queued)


def ours(rows: int, built: int, mails: dict[str, tuple] | None) -> tuple[float, float]:
    from _reset import reset_due, settle
    from _world import as_the_poll_left_them
    from django.core import mail as django_mail
    from django.utils import timezone

    from outbox.dispatch import run_cycle
    from watches.models import Listing, Watch

    started = timezone.now()
    reset_due(started - dt.timedelta(seconds=1))
    as_the_poll_left_them(started, built)
    settle()
    django_mail.outbox = []
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_cycle()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sent = result.as_json()["sent"]
    assert sent == rows == len(django_mail.outbox), f"ours: {sent} of {rows} sent"
    watched = Watch.objects.values("listing_id")
    not_asked = Listing.objects.filter(id__in=watched, last_polled_at__lt=started).count()
    assert not not_asked, f"ours: {not_asked} watched listings not asked again"
    if mails is not None:
        _check(django_mail.outbox, mails, "ours")
    return wall, cpu


def peer(
    folder: Path, templated: bool, mails: dict[str, tuple], only: int | None = None
) -> tuple[float, float]:
    """One `send_queued_mail_until_done` over the templated or the plain mails (the first
    `only` of them when given)."""
    from _reset import settle
    from django.core import mail as django_mail
    from django.db import connection
    from post_office.mail import send_queued_mail_until_done
    from post_office.models import STATUS, Email

    kind = "template_id IS NOT NULL" if templated else "template_id IS NULL"
    expected = len(mails) if only is None else only
    # The two kinds were queued in turn: the first 2 × `only` mails hold `only` of each.
    last = Email.objects.order_by("id").values_list("id", flat=True)[expected * 2 - 1]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM post_office_log")
        # Failed is a status post-office never picks up again (MAX_RETRIES 0).
        cursor.execute("UPDATE post_office_email SET status = %s", [STATUS.failed])
        cursor.execute(
            f"UPDATE post_office_email SET status = %s WHERE {kind} AND id <= %s",
            [STATUS.queued, last],
        )
    settle()  # as for ours
    django_mail.outbox = []
    wall, cpu = time.perf_counter(), time.process_time()
    send_queued_mail_until_done(lockfile=str(folder / "send_queued_mail"))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sent = Email.objects.filter(status=STATUS.sent).count()
    assert sent == expected == len(django_mail.outbox), f"post-office: {sent} of {expected}"
    _check(django_mail.outbox, mails, "templated" if templated else "plain")
    return wall, cpu


def _message_id(mail) -> str:
    return mail.extra_headers["Message-ID"]


def _mail(mail) -> tuple:
    """What makes a mail the same mail: sender, recipients, subject, both parts, headers — the
    unsubscribe link aside, whose signature carries the second it was made."""
    [(html, _)] = mail.alternatives
    link = mail.extra_headers["List-Unsubscribe"].strip("<>")
    return (
        mail.from_email,
        tuple(mail.to),
        mail.subject,
        mail.body.replace(link, "{unsubscribe}"),
        html.replace(link, "{unsubscribe}"),
        {**mail.extra_headers, "List-Unsubscribe": "<{unsubscribe}>"},
    )


def _check(outbox: list, mails: dict[str, tuple], side: str) -> None:
    for sent in outbox:
        assert _mail(sent) == mails[_message_id(sent)], f"{side} sent another mail: {_mail(sent)}"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--ichiba":
        serve_ichiba(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], *(int(arg) for arg in sys.argv[3:7]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--profile-child":
        profile(int(sys.argv[2]))
    else:
        main(profiling=len(sys.argv) > 1 and sys.argv[1] == "--profile")
