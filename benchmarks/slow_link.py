"""A slow link to the database: a loopback proxy that adds a delay to every round trip.

``python -m benchmarks --added-latency-ms 20`` puts one between every process it starts
and the database, to see what the queue does when the server answers slowly (a primary
far away, or one under load): whether its batches hold, and what each job costs then.

Every message a client sends is held for the delay before it is forwarded; the replies
come back at once. A client of MongoDB's wire protocol sends one request at a time on
a connection, so each round trip takes the delay longer (a change feed's waiting read
too). Messages are framed by their length, the first four bytes of each.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from urllib.parse import urlsplit, urlunsplit

HEADER = struct.Struct("<i")


class SlowLink:
    """Listens on a loopback port; forwards to ``host:port`` with ``delay`` seconds added
    to every message sent to it."""

    def __init__(self, host: str, port: int, delay: float) -> None:
        self.target = (host, port)
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="slow-link", daemon=True)

    def start(self) -> SlowLink:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._listener.close()

    def uri(self, uri: str) -> str:
        """``uri`` (of one server) pointed at this link instead, connecting directly
        (the server's own address, in its replies, would take the client round it)."""
        parts = urlsplit(uri)
        if "," in parts.netloc:
            raise ValueError("a slow link goes to one server: give a URI of one host")
        credentials, _, _ = parts.netloc.rpartition("@")
        netloc = f"{credentials}@" if credentials else ""
        query = "&".join(q for q in (parts.query, "directConnection=true") if q)
        return urlunsplit((parts.scheme, f"{netloc}127.0.0.1:{self.port}", parts.path, query, ""))

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=_replies, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        """Forward each whole message from ``client`` after the delay."""
        try:
            while message := _message(client):
                time.sleep(self.delay)
                server.sendall(message)
        except OSError:
            pass
        finally:
            _close(client, server)


def _message(sock: socket.socket) -> bytes:
    """The next whole message of the wire protocol; empty when the connection closed."""
    header = _exactly(sock, HEADER.size)
    if not header:
        return b""
    (length,) = HEADER.unpack(header)
    rest = _exactly(sock, length - HEADER.size)
    return header + rest if len(rest) == length - HEADER.size else b""


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return b""
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _replies(server: socket.socket, client: socket.socket) -> None:
    try:
        while chunk := server.recv(1 << 16):
            client.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(server, client)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.close()


def host_and_port(uri: str) -> tuple[str, int]:
    """The one server ``uri`` names."""
    parts = urlsplit(uri)
    if parts.hostname is None or "," in parts.netloc:
        raise ValueError(f"a slow link goes to one server, not {uri!r}")
    return parts.hostname, parts.port or 27017
