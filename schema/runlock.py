"""One process per run folder: an exclusive OS file lock held for the life of the run.

    with RunLock(folder):      # RunLocked (a ValueError) if another process holds it
        ...                    # write the run

The lock is ``fcntl.flock`` on ``<folder>/.lock``: the kernel releases it when the holding
process exits, however it exits (SIGKILL included), so a crash never leaves a stale lock and
there is nothing to clean up. The file keeps the holder's pid and command line, which the
refusal names. Used by the trainer, the LLM sweep and the simulator sweeps.
"""
from __future__ import annotations

import errno
import json
import os
import sys
import time
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
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLocked(self.folder, read_holder(self.folder)) from None
            raise
        info = {"pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Unlock (the file stays: removing it would let a waiter lock a file that is gone)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
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


def check_free(folder: str | os.PathLike) -> None:
    """Raise :class:`RunLocked` early if a live process holds ``folder`` (see :func:`live_holder`)."""
    holder = live_holder(folder)
    if holder is not None:
        raise RunLocked(Path(folder), holder)


def entries(folder: str | os.PathLike) -> list[Path]:
    """The folder's entries other than the lock file (what makes a run folder non-empty)."""
    return [p for p in Path(folder).iterdir() if p.name != LOCK_NAME]
