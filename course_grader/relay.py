"""Byte relays between the checker's sandbox and the kernel's.

The student's kernel makes its ZeroMQ sockets (Unix sockets, `ipc` transport) on its own
sandbox's /tmp; the grader reaches them as /proc/<pid>/root/tmp/...
(`sandbox.socket_dir_from_host`).
The checker runs in a sandbox of its own, and a mount from another sandbox cannot be bound
into it. So the grader, outside both, listens on a Unix socket of the same name in a folder
of its own (bound read-only into the checker's sandbox: connecting to a socket needs no
write access to its file system) and copies the bytes of every connection to the kernel's
socket and back. ZeroMQ's protocol runs over the byte stream unchanged, so the checker
speaks to the kernel as if directly; nothing is parsed or kept here.

    relay = Relay(kernel_socket_dir, relay_dir, ["ipc-1", "ipc-2", ...])
    ...   # the checker connects to relay_dir/ipc-1 (seen at another path in its sandbox)
    relay.close()
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

__all__ = ["Relay"]

CHUNK = 256 * 1024


class Relay:
    """Listen on `relay_dir/<name>` for each name; forward each connection to
    `target_dir/<name>`. Threads only; `close()` stops everything."""

    def __init__(self, target_dir: str | os.PathLike, relay_dir: str | os.PathLike,
                 names: list[str]) -> None:
        self.target_dir, self.relay_dir = Path(target_dir), Path(relay_dir)
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        for name in names:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(self.relay_dir / name))
            # the checker may run as another user (the sandbox's, when grading runs as root);
            # the folder itself is private to the grader and bound only into its sandbox
            os.chmod(self.relay_dir / name, 0o666)
            listener.listen(16)
            self._track(listener)
            threading.Thread(target=self._accept, args=(listener, name), daemon=True,
                             name=f"relay-{name}").start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self, listener: socket.socket, name: str) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(str(self.target_dir / name))
            except OSError:
                client.close()
                upstream.close()
                continue
            self._track(client)
            self._track(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
