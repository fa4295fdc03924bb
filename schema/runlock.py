"""One process per run folder: an exclusive OS file lock held for the life of the run.

    with RunLock(folder):      # RunLocked (a ValueError) if another process holds it
        ...                    # write the run

The lock is ``fcntl.flock`` on ``<folder>/.lock``: the kernel releases it when the holding
process exits, however it exits (SIGKILL included), so a crash never leaves a stale lock and
there is nothing to clean up. The file keeps the holder's pid and command line, which the
refusal names. Used by the trainer, the LLM sweep and the simulator sweeps.

A flock belongs to the open file, which a forked child shares: a child forked while the lock is
held closes its copy at once (``os.register_at_fork``), so it never keeps the lock after the holder
dies. A lock whose recorded holder is dead but which something else still holds (a process that
inherited the file some other way) blocks nothing: the lock file is replaced, and the new one locked.
"""
from __future__ import annotations

import errno
import json
import os
import sys
import time
import weakref
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".lock"
"""The lock file inside a run folder (not a result: readers and emptiness checks skip it)."""


class RunLocked(ValueError):
    """The folder is locked by another live process."""

    def __init__(self, folder: Path, holder: dict):
        self.folder, self.holder = folder, holder
        pid = holder.get("pid", "unknown")
        since = f" since {holder['since']}" if holder.get("since") else ""
        cmd = f" ({' '.join(holder['argv'])[:200]})" if holder.get("argv") else ""
        super().__init__(f"{folder} is in use by another process: pid {pid}{since}{cmd}; one process per run folder "
                         f"(wait for it to finish, or stop it first)")


def read_holder(folder: str | os.PathLike) -> dict:
    """What the lock file says about its holder (``{}`` if unreadable); no lock is taken."""
    try:
        return json.loads((Path(folder) / LOCK_NAME).read_text() or "{}")
    except (OSError, ValueError):
        return {}


_HELD: weakref.WeakSet[RunLock] = weakref.WeakSet()


def _close_in_forked_child() -> None:
    """In a child forked while locks are held: close the child's copies (the parent keeps the lock)."""
    for lock in list(_HELD):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_forked_child)


def _try_lock(path: Path) -> int | None:
    """An fd holding ``path``'s lock, or None if another open file holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


class _FolderGuard:
    """A short blocking flock on the folder itself around taking the lock and writing the holder's
    record, so that a lock file is replaced (:meth:`RunLock.acquire`) by one process at a time and
    never while its new holder has not yet written its pid."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __enter__(self):
        self._fd = os.open(self.folder, os.O_RDONLY | os.O_CLOEXEC)
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self._fd)  # closing drops the flock


class RunLock:
    """Exclusive, non-blocking lock on ``folder`` (which must exist); a context manager."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        if self._fd is not None:
            return self
        path = self.folder / LOCK_NAME
        with _FolderGuard(self.folder):
            fd = _try_lock(path)
            if fd is None:
                holder = read_holder(self.folder)
                if not _orphaned(self.folder, holder):
                    raise RunLocked(self.folder, holder)
                # the recorded holder is dead; what still holds the file is no run: lock a fresh file
                fresh = self.folder / f"{LOCK_NAME}.{os.getpid()}"
                os.close(os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644))
                os.replace(fresh, path)
                fd = _try_lock(path)
                if fd is None:  # pragma: no cover - only a process that ignores the guard gets here
                    raise RunLocked(self.folder, read_holder(self.folder))
            info = {"pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        _HELD.add(self)
        return self

    def release(self) -> None:
        """Unlock (the file stays: removing it would let a waiter lock a file that is gone)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        _HELD.discard(self)
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> RunLock:  # noqa: PYI034
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def live_holder(folder: str | os.PathLike) -> dict | None:
    """The lock file's record if its pid is a live process (not a zombie, and on Linux still running
    the recorded command), else None: a cheap early answer that takes no lock (the flock in
    :meth:`RunLock.acquire` is what actually decides)."""
    holder = read_holder(folder)
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return None
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self").exists():  # Linux: a zombie or a reused pid holds no lock
        try:
            if "\nState:\tZ" in (proc / "status").read_text():
                return None
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        argv = [a.encode() for a in holder.get("argv") or []]
        if len(argv) > 1 and argv[-1:] != [a for a in cmdline if a][-1:]:  # its last argument (python -c: none)
            return None
        return holder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, owned by someone else
        return holder
    return holder


def _orphaned(folder: Path, holder: dict) -> bool:
    """True if the lock file names a holder that is no longer alive (see :func:`live_holder`)."""
    return isinstance(holder.get("pid"), int) and holder["pid"] != os.getpid() and live_holder(folder) is None


def check_free(folder: str | os.PathLike) -> None:
    """Raise :class:`RunLocked` early if a live process holds ``folder`` (see :func:`live_holder`)."""
    holder = live_holder(folder)
    if holder is not None:
        raise RunLocked(Path(folder), holder)


def entries(folder: str | os.PathLike) -> list[Path]:
    """The folder's entries other than the lock file (what makes a run folder non-empty)."""
    return [p for p in Path(folder).iterdir() if p.name != LOCK_NAME]
