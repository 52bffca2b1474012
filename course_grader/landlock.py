"""A process confines itself with Linux's Landlock: it may read only beneath the paths it
names, write only beneath some of them, and signal no process outside its own domain.

Landlock needs no privilege and no namespace, so a process inside the grading sandbox (where
bwrap forbids new namespaces) can still narrow itself down: each checker that
`course_grader.warm_checker` forks calls `confine` before it reads anything of a submission's.
A domain is for life and inherited by every child; a process that confines itself again only
narrows it further.

    problem = unavailable_reason()     # None where confine() can work
    confine(writable=[folder, "/dev/null"], readable=["/usr", "/etc", ...])

Rights that a kernel older than the `NEEDED_ABI` version of Landlock does not know cannot be
taken away there: `unavailable_reason` then says so, and callers confine another way.
"""

from __future__ import annotations

import ctypes
import os
import stat

__all__ = ["NEEDED_ABI", "abi_version", "confine", "unavailable_reason"]

# Landlock's system calls have the same numbers on every architecture (they are newer than
# the unified numbering).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# File-system rights (linux/landlock.h): reading files and listing folders, and every right
# that writes, creates, removes or links. Executing is not restricted.
_WRITE_FILE, _READ_FILE, _READ_DIR, _TRUNCATE = 1 << 1, 1 << 2, 1 << 3, 1 << 14
_READS = _READ_FILE | _READ_DIR
_WRITES = (_WRITE_FILE | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10
           | 1 << 11 | 1 << 12 | 1 << 13 | _TRUNCATE)   # ... REMOVE_DIR to REFER, TRUNCATE
_FILE_RIGHTS = _WRITE_FILE | _READ_FILE | _TRUNCATE   # what a rule on a single file may allow
# Scopes (ABI 6): no connecting to abstract Unix sockets made outside the domain, no signals
# to processes outside it.
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
NEEDED_ABI = 6   # Linux 6.12: scoped signals


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)


def _call(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"Landlock: {os.strerror(err)}")
    return result


def abi_version() -> int:
    """The version of Landlock this kernel offers; 0 where there is none (not Linux, a kernel
    older than 5.13, or Landlock not enabled)."""
    try:
        return _call(_CREATE_RULESET, None, ctypes.c_size_t(0),
                     ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0


def unavailable_reason() -> str | None:
    """None if `confine` works here; otherwise why not."""
    version = abi_version()
    if version >= NEEDED_ABI:
        return None
    found = f"version {version}" if version else "no Landlock"
    return (f"the kernel offers {found}; confining a process's writes and signals needs "
            f"Landlock version {NEEDED_ABI} (Linux 6.12 or later, with Landlock enabled)")


def confine(writable: list[str], readable: list[str] = ()) -> None:
    """From now on this process and its children may read only beneath the paths `readable`
    and `writable` (folders, or single files such as /dev/null), write, create, remove or link
    files only beneath `writable`, and signal or reach by abstract Unix socket only processes
    of their own domain. Descriptors already open are not affected. Raises OSError if
    Landlock refuses (check `unavailable_reason` first)."""
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)   # required to confine without privileges
    attr = _RulesetAttr(_READS | _WRITES, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
    ruleset = _call(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                    ctypes.c_uint32(0))
    try:
        for path, allowed in [*((p, _READS | _WRITES) for p in writable),
                              *((p, _READS) for p in readable)]:
            _allow(ruleset, path, allowed)
        _call(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, allowed: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            allowed &= _FILE_RIGHTS
        rule = _PathBeneath(allowed, fd)
        _call(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
              ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)
