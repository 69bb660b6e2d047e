"""Cross-process locks, one way for every stage: a lock file held with `flock` on POSIX, and with
`filelock` where there is no `flock` (Windows' LockFileEx, a filesystem without flock: its soft
lock), so `import workbench`, ingestion and replay run on macOS and Windows as on Linux. A lock is
held by an open file, so a process that dies releases it.

On POSIX the lock is taken with `fcntl.flock` directly, as `filelock` does there: importing
`filelock` costs ~60 M instructions, a fifth of what Workbench's imports add to a pytest session's start."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

# flock refused by the filesystem itself (not another holder): filelock's soft lock takes over
_NO_FLOCK = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK})


class _Flock:
    """A lock file held by an open descriptor (not inherited by child processes)."""

    def __init__(self, descriptor: int) -> None:
        self._descriptor: int | None = descriptor

    # `os.close` bound at definition: a lock dropped while the interpreter exits, its modules' names
    # already cleared, still closes (closing the only descriptor of the file releases its flock)
    def release(self, _close=os.close) -> None:
        if self._descriptor is not None:
            descriptor, self._descriptor = self._descriptor, None
            _close(descriptor)

    def __del__(self) -> None:  # as filelock's: a lock no one keeps is released
        self.release()


def _take(lock_path: Path, wait: bool):
    """The lock at `lock_path` held (an object with `release()`), or None when another holder has it
    and `wait` is False. The folder and the file are created, private."""
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is not None:
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            return _Flock(descriptor)
        except BlockingIOError:
            os.close(descriptor)
            return None
        except OSError as exc:
            os.close(descriptor)
            if exc.errno not in _NO_FLOCK:
                raise
    from filelock import FileLock, Timeout

    lock = FileLock(lock_path, mode=0o600)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        return None
    return lock


@contextmanager
def exclusive(lock_path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold the lock at `lock_path` (created with its folder, private) for the block; yields True.
    With `wait=False` it yields False at once when another holder has it, and holds nothing. Each
    call takes its own lock: two threads of one process exclude each other like two processes."""
    lock = _take(lock_path, wait)
    if lock is None:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def hold(lock_path: Path):
    """Take the lock at `lock_path` for as long as the returned object lives (a process that dies
    releases it); None when another holder has it."""
    return _take(lock_path, wait=False)


def held(lock_path: Path) -> bool:
    """Is the lock at `lock_path` held by some process (this one included) now?"""
    lock = hold(lock_path)
    if lock is None:
        return True
    lock.release()
    return False
