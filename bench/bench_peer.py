"""Against the peer, the same work: 10,000 notification mails through our dispatcher's e-mail
channel and through django-post-office's `send_queued_mail`, templated and plain, every mail
through Django's locmem mail backend, in the same run, on SQLite and PostgreSQL.

Three sides, each sending the same 10,000 mails (one to each of 10,000 addresses: every
watcher has one notification due, so no digest forms and every notification is one mail):

- ours: one dispatcher cycle (`outbox.dispatch.run_cycle`) over 10,000 due e-mail rows —
  claims with a fence, guards, a re-fetch of every listing from the demo marketplace (each
  listing as the poll that detected its rows left it two minutes before: too old to reuse, so
  every round asks) kept by the observation rule, the re-check, the message in the device's
  language, the lease's intent; then the e-mail channel renders the two notification
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
every run the bench checks that each side delivered those very mails.

All three share one database the bench makes: a SQLite file (WAL, as the project configures
it) in var/, and a PostgreSQL database `yasugoro_bench_peer_*` it creates on $BENCH_PG_URL and
drops at exit (skipped with a message when no server answers). One child process per database
and listing count: 100 listings (100 watches a listing: the re-fetch is a small share of a
mail) and 6,667 (1–2 watches a listing: nearly every mail asks for its own). Within a child each
round runs the three sides in turn over the same rows, reset between runs, starting one side
later each round; printed are medians and the median of the per-round ratios, wall and CPU
(this process, all threads). On SQLite that includes the database's work; on PostgreSQL the
server's processes do it outside the figure — ours writes more (claims, events, baselines),
post-office opens a new connection for every batch of 100.

post-office is a bench-only requirement (bench/requirements-bench.txt): when it is missing,
the bench installs it into var/bench-packages (the project's venv stays as it is), or says why
it cannot and skips.

    .venv/bin/python bench/bench_peer.py [ROWS] [ROUNDS] [LISTINGS,LISTINGS,…]   # 10000 3 100,6667
    .venv/bin/python bench/bench_peer.py --profile [ROWS]                          # 2000

`--profile` runs ours and post-office's templated mail once each under cProfile (CPU time),
on SQLite with 100 listings, and prints where each spends it. Our deliveries then run in the
cycle's own thread (OUTBOX_DELIVERY_WORKERS=1) so the profile sees them; post-office's run in
its pool's threads, which cProfile does not follow: its profile shows the rest (reading the
queue, compiling and rendering the templates, the bookkeeping).
"""

from __future__ import annotations

import cProfile
import datetime as dt
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ROOT / "var" / "bench-packages"
REQUIREMENTS = Path(__file__).resolve().parent / "requirements-bench.txt"
ROWS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 3
LISTINGS = (100, 6_667)
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
    """Whether post-office imports from var/bench-packages, installing it there first."""
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
    listing_counts: tuple[int, ...] = LISTINGS
    if len(sys.argv) > 3:
        listing_counts = tuple(int(n) for n in sys.argv[3].split(","))
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
        # Production settings (DEBUG would keep a log of every query), the demo marketplace
        # in-process, no demo tick.
        "DEBUG": "0",
        "DEMO_MARKET": "1",
        "DEMO_TICK": "0",
        "LOG_LEVEL": "WARNING",
        "VAPID_SUBJECT": "mailto:bench@example.invalid",
        "OUTBOX_CYCLE_SECONDS": "3600",
    }
    if profiling:
        rows = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000
        env["OUTBOX_DELIVERY_WORKERS"] = "1"
        subprocess.run([sys.executable, __file__, "--profile-child", str(rows)], env=env)
        return
    print(
        f"{ROWS:,} mails a side, {ROUNDS} rounds (the sides in turn), medians; "
        f"{HISTORY_DAYS} days × {POINTS_PER_DAY} price points a listing",
        flush=True,
    )
    for vendor in vendors:
        for listings in listing_counts:
            args = ["--child", vendor, str(listings), str(ROWS), str(ROUNDS)]
            subprocess.run([sys.executable, __file__, *args], env=env, check=False)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


# --- one child: one database, one listing count (Django) ---------------------------------


def child(vendor: str, listings: int, rows: int, rounds: int) -> None:
    from _setup import django_on_temp_postgres, django_on_temp_sqlite

    if vendor == "sqlite":
        django_on_temp_sqlite("peer", under=ROOT / "var")
    else:
        django_on_temp_postgres(f"peer_{listings}")
    folder = Path(os.environ["YASUGORO_VAR_DIR"])
    built, mails = build(listings, rows)
    # As a django-q2 worker does at spawn (outbox.apps): what is loaded stays out of the
    # collector's walks — here for every side, in this one process.
    from common.longlived import freeze_loaded
    from outbox.apps import WORKER_REGISTRIES

    freeze_loaded(["outbox.tasks", "post_office.mail"], WORKER_REGISTRIES)
    runs: dict[str, Callable[[], tuple[float, float]]] = {
        "ours": lambda: ours(rows, built, mails),
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

    def ratio(times: dict[str, list[float]], peer_side: str) -> str:
        # ours ÷ peer in mails per second: the peer's time over ours, per round.
        per_round = [p / o for o, p in zip(times["ours"], times[peer_side], strict=True)]
        rounds_text = ", ".join(f"{r:.2f}" for r in per_round)
        return f"{statistics.median(per_round):.2f}×  (per round: {rounds_text})"

    lines = [f"\n{vendor}, {listings:,} listings ({rows / listings:.1f} watches a listing):"]
    for side in SIDES:
        rate = rows / statistics.median(wall[side])
        cpu_ms = 1000 * statistics.median(cpu[side]) / rows
        lines.append(f"  {LABELS[side]:<31} {rate:>7,.0f} mails/s  {cpu_ms:5.2f} CPU ms a mail")
    for peer_side in ("templated", "plain"):
        for name, times in (("wall", wall), ("CPU", cpu)):
            label = f"ours ÷ post-office {peer_side}, {name}:"
            lines.append(f"  {label:<39} {ratio(times, peer_side)}")
    print("\n".join(lines), flush=True)


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
    ],
    "templated": [
        ("compiling the templates", [("django/template/engine.py", "from_string")]),
        ("rendering them", [("django/template/backends/django.py", "render")]),
    ],
}


def profile(rows: int) -> None:
    """One run of ours and one of post-office's templated mail under cProfile, on CPU time:
    the functions that take most, and the share of the parts in PARTS."""
    from _setup import django_on_temp_sqlite

    django_on_temp_sqlite("peer", under=ROOT / "var")
    folder = Path(os.environ["YASUGORO_VAR_DIR"])
    built, mails = build(100, rows)
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


def build(listing_count: int, rows: int) -> tuple[int, dict[str, tuple]]:
    """`listing_count` demo listings at ¥900 with their history; `rows` e-mail devices (their
    addresses confirmed, Japanese), each with one target-price watch (¥950) and its due row;
    one unmeasured dispatch cycle, whose mails become `rows` templated and `rows` plain
    queued post-office mails. Returns the history's last price point and our mails, by
    Message-ID (`_mail`)."""
    from _world import due_rows, listings_with_history
    from django.core import mail as django_mail
    from django.db import connection
    from django.utils import timezone

    from watches.models import Channel, Device, NotifyVia

    codes = [f"bench-{i}" for i in range(listing_count)]
    listings = listings_with_history(codes, HISTORY_DAYS, POINTS_PER_DAY)
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
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--profile-child":
        profile(int(sys.argv[2]))
    else:
        main(profiling=len(sys.argv) > 1 and sys.argv[1] == "--profile")
