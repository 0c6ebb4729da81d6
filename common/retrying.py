"""A short transaction run again when the database ended it only to let another go on.

PostgreSQL breaks a deadlock by failing one statement of the transactions caught in it
(`DeadlockDetected`), and above READ COMMITTED it refuses a transaction that could not be
serialized with another (`SerializationFailure`). Neither says the transaction was wrong:
run again a moment later, it goes through. Every step of a dispatch cycle that writes is
one short transaction run through `retrying`, so such a failure costs the step a pause, not
the cycle its rows (docs/decisions/0063-deadlocks.md).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection
from psycopg import errors

log = logging.getLogger("common.retrying")

T = TypeVar("T")

# Tries in all. A transaction that meets a deadlock this often in a row meets something
# that will not go away by itself: the error is raised.
ATTEMPTS = 5
# The first pause in seconds; each next one doubles. Jittered, so that two transactions
# that met do not start again in step.
PAUSE = 0.05

_TRANSIENT = (errors.DeadlockDetected, errors.SerializationFailure)


def transient(exc: BaseException) -> bool:
    """Whether `exc` is the database ending a transaction that may simply run again."""
    return isinstance(exc, OperationalError) and isinstance(exc.__cause__, _TRANSIENT)


def retrying(step: Callable[[], T], *, attempts: int = ATTEMPTS) -> T:
    """`step()`, run again when it fails `transient`ly — at most `attempts` times in all,
    after a jittered pause of PAUSE, then twice that, and so on. `step` must be one whole
    transaction and read anything it stamps (the time) itself, so that each try is a new
    one. Inside a transaction the caller opened, nothing is retried: that transaction is
    aborted and it is the caller's to run again.

        claim = retrying(lambda: claim_due(holder, size, clock()))
    """
    attempt = 1
    while True:
        try:
            return step()
        except OperationalError as exc:
            if attempt >= attempts or connection.in_atomic_block or not transient(exc):
                raise
            pause = PAUSE * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
            log.warning(
                "%s (try %d of %d); trying again in %.2f s",
                str(exc).splitlines()[0],
                attempt,
                attempts,
                pause,
            )
            time.sleep(pause)
            attempt += 1
