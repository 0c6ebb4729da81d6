"""What every fake marketplace API shares: a real HTTP server on 127.0.0.1, in a thread, that
records each GET (`requests`: the queries; `received`: path, query, headers and client) and
answers it through the subclass's `answer(request)`.

`answer` returns (status, headers, body), or None to send nothing at all (a stall: it waits
on `release`, which `stop` sets). `arrived(request)`, called under the lock as each request is
recorded, may return another request to answer (a fault marked on it), or None to reset the
connection instead of answering."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

Answer = tuple[int, dict[str, str], bytes] | None


@dataclass(frozen=True)
class Received:
    """One GET as the fake saw it. Header names are lower case."""

    path: str
    query: dict[str, str]
    headers: dict[str, str] = field(default_factory=dict)
    client: str = "127.0.0.1"
    fault: str = ""  # a fault `arrived` chose for this request

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class _Server(ThreadingHTTPServer):
    # Several dispatcher processes with a pool of connections each: the default backlog of 5
    # would drop connections before the server ever sees them.
    request_queue_size = 256


class FakeAPI:
    def __init__(self, path: str) -> None:
        self.requests: list[dict[str, str]] = []
        self.received: list[Received] = []
        # Arrival times per application id (time.time()), and the marketplace's allowance as
        # it counts it: at most `per_second` requests of an id in one wall-clock second; the
        # ones beyond are refused (`too_many` counts them).
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self.per_second: int | None = None
        self.too_many = 0
        self._seconds: Counter[tuple[str, int]] = Counter()
        self.stall_seconds = 5.0
        self.release = threading.Event()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                received = Received(
                    url.path,
                    query,
                    {name.lower(): value for name, value in self.headers.items()},
                    self.client_address[0],
                )
                with fake.lock:
                    fake.requests.append(query)
                    fake.received.append(received)
                    request = fake.arrived(received)
                if request is None:
                    # SO_LINGER 0: the client gets an RST instead of an answer.
                    linger = struct.pack("ii", 1, 0)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    self.connection.close()
                    self.close_connection = True
                    return
                answer = fake.answer(request)
                if answer is None:
                    return
                status, headers, body = answer
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # quiet test output
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()  # let stalled handlers finish
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def stall(self) -> None:
        """Wait (past any sane read timeout) before sending nothing."""
        self.release.wait(self.stall_seconds)

    def arrived(self, request: Received) -> Received | None:
        return request

    def over_allowance(self, app_id: str) -> bool:
        """Record a request of `app_id` arriving now (under the lock); True when it is one
        more than `per_second` in its wall-clock second."""
        at = time.time()
        self.arrivals[app_id].append(at)
        self._seconds[app_id, int(at)] += 1
        if self.per_second is not None and self._seconds[app_id, int(at)] > self.per_second:
            self.too_many += 1
            return True
        return False

    def max_per_second(self) -> dict[str, int]:
        """The most requests any one wall-clock second saw, per application id."""
        with self.lock:
            most: dict[str, int] = {}
            for (app_id, _), count in self._seconds.items():
                most[app_id] = max(most.get(app_id, 0), count)
            return most

    def answer(self, request: Received) -> Answer:
        raise NotImplementedError
