"""One dispatcher process for the reliability suite: runs `run_cycle` until a cycle finds
nothing to claim (or for at most --max-seconds), then prints its totals as one JSON object.

Settings come from the environment, as for any Yasugoro process (DATABASE_URL,
DJANGO_SETTINGS_MODULE, PUSH_SERVICE_HOSTS, OUTBOX_*). With --ready/--go it touches the first
file once Django is set up and waits for the second to exist, so several processes can start
their first cycle together.

    python tests/reliability/run_dispatcher.py [--ready FILE --go FILE] [--max-seconds N]
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
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from outbox.dispatch import run_cycle

    if args.ready:
        args.ready.touch()
    if args.go:
        deadline = time.monotonic() + 120
        while not args.go.exists():
            if time.monotonic() > deadline:
                raise SystemExit("never told to go")
            time.sleep(0.005)

    totals = {"cycles": 0, "claimed": 0, "sent": 0, "dropped": 0, "retry": 0, "failed": 0}
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
    print(json.dumps(totals), flush=True)


if __name__ == "__main__":
    main()
