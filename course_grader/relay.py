"""Byte relays to a sandboxed kernel's sockets, which the kernel makes and could replace.

The student's kernel makes its ZeroMQ sockets (Unix sockets, `ipc` transport) in SOCKET_DIR on
its own sandbox's /tmp, a file system the kernel controls: it may replace a socket, or a folder
on the way to it, with a link, and a link there resolved from the host names a host file
(an absolute link restarts at the host's root). So no process of the grader ever connects to
a path inside the sandbox. `SandboxSockets` holds a descriptor of the sandbox's root, opened
once when the sandbox starts, and reaches each socket beneath it one component at a time with
O_NOFOLLOW; anything that is not a folder on the way, or not a socket at the end, is refused
(and recorded in `refused`), never followed. The connection is then made through the
descriptor of the socket itself (/proc/self/fd/N), so no path is resolved again.

A `Relay` listens on Unix sockets of the same names in a folder of the grader's own, which
only the grader can write, and copies the bytes of every connection to the kernel's socket
and back. ZeroMQ's protocol runs over the byte stream unchanged, so the grader's kernel client
and the checker (in a sandbox of its own, where this folder is bound read-only) speak to the
kernel as if directly; nothing is parsed or kept here.

    sockets = SandboxSockets(root_fd)                 # sandbox.open_sandbox_root(runtime_dir)
    relay = Relay(sockets.connect, relay_dir, ["ipc-1", "ipc-2", ...])
    checker_relay = Relay(relay_dir, checker_relay_dir, [...])   # a folder of the grader's
    ...   # connect to relay_dir/ipc-1
    relay.close(); sockets.close()
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["LinkRefused", "Relay", "SandboxSockets", "connect_in_folder"]

CHUNK = 256 * 1024


class LinkRefused(OSError):
    """A path in the sandbox led through something other than a folder to a socket."""


class SandboxSockets:
    """Connect to the Unix sockets in `folder` of a sandbox whose root is the descriptor
    `root_fd` (owned by this object from now on), never following a link."""

    def __init__(self, root_fd: int, folder: str) -> None:
        self._root = root_fd
        self.parts = [p for p in folder.split("/") if p]
        self.refused: list[str] = []
        self._lock = threading.Lock()

    def connect(self, name: str) -> socket.socket:
        """A stream socket connected to `folder/name` in the sandbox. Raises
        FileNotFoundError while it is not there yet, LinkRefused if something on the way is
        a link or not what it should be (also recorded in `refused`)."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"expected a socket's file name, got {name!r}")
        fds = []
        try:
            fd = self._root
            for part in self.parts:
                fd = self._open(fd, part, os.O_DIRECTORY, f"{'/'.join(self.parts)}")
                fds.append(fd)
            fd = self._open(fd, name, 0, f"{'/'.join(self.parts)}/{name}")
            fds.append(fd)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                self._refuse(f"/{'/'.join(self.parts)}/{name} is not a socket")
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                client.connect(f"/proc/self/fd/{fd}")  # the socket itself: nothing resolved
            except OSError:
                client.close()
                raise
            return client
        finally:
            for fd in fds:
                os.close(fd)

    def _open(self, parent: int, part: str, flags: int, shown: str) -> int:
        try:
            fd = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | flags, dir_fd=parent)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                self._refuse(f"/{shown} is a link or not a folder: the kernel put something "
                             f"else in place of its sockets")
            raise
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            os.close(fd)
            self._refuse(f"/{shown} is a link: the kernel replaced its socket with a link")
        return fd

    def _refuse(self, why: str) -> None:
        with self._lock:
            if why not in self.refused:
                self.refused.append(why)
        raise LinkRefused(errno.ELOOP, why)

    def close(self) -> None:
        if self._root >= 0:
            os.close(self._root)
            self._root = -1


def connect_in_folder(folder: str | os.PathLike) -> Callable[[str], socket.socket]:
    """A connector for sockets in a folder only the grader can write (another relay's)."""
    def connect(name: str) -> socket.socket:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(str(Path(folder) / name))
        except OSError:
            client.close()
            raise
        return client

    return connect


class Relay:
    """Listen on `relay_dir/<name>` for each name; forward each connection to
    `target(name)`, or to `target/<name>` if `target` is a folder (only a folder that the
    grader alone can write: see `connect_in_folder`). Threads only; `close()` stops
    everything."""

    def __init__(self, target: Callable[[str], socket.socket] | str | os.PathLike,
                 relay_dir: str | os.PathLike, names: list[str]) -> None:
        self.connect = target if callable(target) else connect_in_folder(target)
        self.relay_dir = Path(relay_dir)
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
            try:
                upstream = self.connect(name)
            except OSError:   # not there yet (the client connects again) or refused
                client.close()
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
