"""A TCP relay to a real server (Redis) that a test can cut, as a failover cuts the server's
clients: every connection through it breaks at once, and no new one is accepted."""

from __future__ import annotations

import contextlib
import select
import socket
import socketserver
import threading


class Relay(socketserver.ThreadingTCPServer):
    """Listens on 127.0.0.1 (`port`) and relays each connection to `target`."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sockets: list[socket.socket] = []
        self.cut_already = False
        super().__init__(("127.0.0.1", 0), _Pipe)
        self.port = self.server_address[1]
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def cut(self) -> None:
        if self.cut_already:
            return
        self.cut_already = True
        self.shutdown()
        self.server_close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class _Pipe(socketserver.BaseRequestHandler):
    server: Relay

    def handle(self) -> None:
        upstream = socket.create_connection(self.server.target)
        self.server.sockets += [self.request, upstream]
        pair = {self.request: upstream, upstream: self.request}
        try:
            while True:
                ready, _, _ = select.select(list(pair), [], [], 5)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)
        except OSError:
            return
