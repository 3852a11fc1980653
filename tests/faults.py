"""A network link a test cuts at a chosen moment: a TCP proxy on 127.0.0.1 in front of a real server (PostgreSQL,
moto's S3), passing bytes both ways until what a client sends matches a trigger. Then the link goes down: its
connections are closed and new ones refused (or, stalled, they stay open and carry nothing), until the test restores
it. No pytest here."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


class Link:
    """``port`` forwards to ``target`` (a port of 127.0.0.1). ``arm(patterns, after)`` cuts the link when a client
    has sent each of ``patterns`` in order on one connection: before passing the last one on, or (``after``) just
    after, so that the server gets it and the client never hears back; with ``stall``, the link then carries nothing
    while keeping its connections open (a server that stopped answering)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.down = False
        self.fired = threading.Event()
        self._patterns: list[bytes] = []
        self._after = False
        self._stall = False
        self.stalled = False
        self.muted = False  # answers from the server are dropped (set before a trigger passed on "after")
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, patterns: list[bytes], after: bool = False, stall: bool = False) -> None:
        with self._lock:
            self._patterns, self._after, self._stall = list(patterns), after, stall
            self.fired.clear()

    def cut(self) -> None:
        with self._lock:
            self.down = True
            self._patterns = []
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()
        self.fired.set()

    def release(self) -> None:
        """A stalled link carries on: what it held goes through, late."""
        self.stalled = False

    def restore(self) -> None:
        if self.stalled:
            self.cut()
        with self._lock:
            self.down = self.stalled = self.muted = False

    def close(self) -> None:
        self.cut()
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, upstream}
            seen = [0]  # how many of the armed patterns this connection has sent
            threading.Thread(target=self._pipe, args=(client, upstream, seen), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, None), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, seen: list[int] | None) -> None:
        tail = b""
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            cut_after = False
            if seen is not None:
                with self._lock:
                    patterns, after = self._patterns, self._after
                window = tail + data
                while patterns and seen[0] < len(patterns) and patterns[seen[0]] in window:
                    window = window[window.index(patterns[seen[0]]) + len(patterns[seen[0]]) :]
                    seen[0] += 1
                if patterns and seen[0] == len(patterns):
                    if self._stall:
                        self.stalled, self._patterns = True, []
                        self.fired.set()
                    elif not after:
                        self.cut()
                        return
                    else:
                        cut_after = self.muted = True  # muted first: the server's answer must not get through
                tail = (tail + data)[-64:]
            while self.stalled:  # hold what came, answer nothing
                if self.down:
                    return
                threading.Event().wait(0.05)
            if seen is None and self.muted:
                continue  # an answer from the server after the trigger: the client never hears it
            try:
                sink.sendall(data)
            except OSError:
                break
            if cut_after:
                self.cut()
                return
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def link(target: int) -> Iterator[Link]:
    one = Link(target)
    try:
        yield one
    finally:
        one.close()
