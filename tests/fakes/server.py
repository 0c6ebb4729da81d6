"""What every fake marketplace API shares: a real HTTP server on 127.0.0.1, in a thread, that
records each GET's query and answers it through the subclass's `answer(path, query)`.

`answer` returns (status, headers, body), or None to send nothing at all (a stall: it waits
on `release`, which `stop` sets). `arrived(query)`, called under the lock as each request is
recorded, may return None to reset the connection instead of answering."""

from __future__ import annotations

import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

Answer = tuple[int, dict[str, str], bytes] | None


class _Server(ThreadingHTTPServer):
    # Several dispatcher processes with a pool of connections each: the default backlog of 5
    # would drop connections before the server ever sees them.
    request_queue_size = 256


class FakeAPI:
    def __init__(self, path: str) -> None:
        self.requests: list[dict[str, str]] = []
        self.stall_seconds = 5.0
        self.release = threading.Event()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query: dict[str, str] | None = {k: v[-1] for k, v in parse_qs(url.query).items()}
                with fake.lock:
                    fake.requests.append(query)
                    query = fake.arrived(query)
                if query is None:
                    # SO_LINGER 0: the client gets an RST instead of an answer.
                    linger = struct.pack("ii", 1, 0)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    self.connection.close()
                    self.close_connection = True
                    return
                answer = fake.answer(url.path, query)
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

    def arrived(self, query: dict[str, str]) -> dict[str, str] | None:
        return query

    def answer(self, path: str, query: dict[str, str]) -> Answer:
        raise NotImplementedError
