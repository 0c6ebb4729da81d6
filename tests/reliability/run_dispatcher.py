"""One dispatcher process for the reliability suite: runs `run_cycle` until a cycle finds
nothing to claim (or for at most --max-seconds), then prints its totals as one JSON object.

Settings come from the environment, as for any Yasugoro process (DATABASE_URL,
DJANGO_SETTINGS_MODULE, PUSH_SERVICE_HOSTS, OUTBOX_*). With --ready/--go it touches the first
file once Django is set up and waits for the second to exist, so several processes can start
their first cycle together. With --passes N it does that N times without starting again:
after pass k it touches <ready>-<k>, and pass k + 1 waits for <go>-<k + 1>.

    python tests/reliability/run_dispatcher.py [--ready FILE --go FILE [--passes N]]
        [--max-seconds N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--go", type=Path)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--passes", type=int, default=1)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from outbox.dispatch import run_cycle

    if args.ready:
        args.ready.touch()
    totals = {"cycles": 0, "claimed": 0, "sent": 0, "dropped": 0, "retry": 0, "failed": 0}
    for pass_ in range(1, args.passes + 1):
        if args.go:
            _wait_for(args.go if pass_ == 1 else Path(f"{args.go}-{pass_}"))
        stop_at = time.monotonic() + args.max_seconds
        while time.monotonic() < stop_at:
            result = run_cycle()
            totals["cycles"] += 1
            totals["claimed"] += result.claimed
            for key, value in result.as_json().items():
                if key in totals:
                    totals[key] += value
            if result.claimed == 0:
                break
        if args.passes > 1 and args.ready:
            Path(f"{args.ready}-{pass_}").touch()
    print(json.dumps(totals), flush=True)


def _wait_for(go: Path) -> None:
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
        time.sleep(0.005)


if __name__ == "__main__":
    main()
