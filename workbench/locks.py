"""Cross-process locks, one way for every stage: a lock file held with `flock` on POSIX, and with
`filelock` where there is no `flock` (Windows' LockFileEx, a filesystem without flock: its soft
lock), so `import workbench`, ingestion and replay run on macOS and Windows as on Linux. A lock is
held by an open file, so a process that dies releases it.

A lock file that is not a regular file of this user's (a symbolic link, a folder, a FIFO, another
user's file, unless this user is root) is refused, never followed nor shared: `WB_LOCK_UNSAFE`, naming the file and the fix.
Another user's file could be held forever to stop ingestion, a link could make us create or lock a
file elsewhere.

On POSIX the lock is taken with `fcntl.flock` directly, as `filelock` does there: importing
`filelock` costs ~60 M instructions, a fifth of what Workbench's imports add to a pytest session's start."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.errors import WorkbenchError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

# flock refused by the filesystem itself (not another holder): filelock's soft lock takes over
_NO_FLOCK = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK})
# os.open of an existing lock file refused for what the file is: a link (O_NOFOLLOW: ELOOP, EMLINK on
# the BSDs), a folder, another user's private file
_REFUSED = frozenset({errno.ELOOP, errno.EMLINK, errno.EISDIR, errno.EACCES, errno.EPERM, errno.ENXIO})


def _problem(status: os.stat_result, uid: int | None = None) -> str | None:
    """What makes a lock file (its `lstat`, or `fstat` once open) unsafe to lock for the user `uid`
    (None: this process's); None: nothing. Root takes any user's file: a container that runs as root
    on a project folder its user made (a bind mount) finds their lock files, and root is held off by
    nothing another user's file could do."""
    if stat.S_ISLNK(status.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(status.st_mode):
        return "is not a regular file (a folder, a FIFO or a device)"
    uid = uid if uid is not None else os.getuid() if hasattr(os, "getuid") else None
    if uid not in (None, 0) and status.st_uid != uid:
        return f"belongs to another user (uid {status.st_uid}, this process runs as uid {uid})"
    return None


def _unsafe(lock_path: Path, problem: str) -> WorkbenchError:
    return WorkbenchError(
        "WB_LOCK_UNSAFE", f"the lock file {lock_path} {problem}: Workbench neither follows nor shares such "
        "a file, so what needs this lock does not run until it is replaced (for `.ingest.lock`: spooled "
        "records stay in the spool, none lost, and the store stops growing)",
        f"remove it (`rm {lock_path}`) as the user Workbench runs as: the next use makes it again, a "
        "private regular file",
    )


def check(lock_path: Path) -> None:
    """Raise `WB_LOCK_UNSAFE` when the lock file at `lock_path` exists and would be refused (one
    `lstat`): for a process that never takes the lock itself but starts one that does."""
    if fcntl is None:
        return
    try:
        problem = _problem(os.lstat(lock_path))
    except OSError:  # absent (made at its first use), or its folder unreadable: the lock says why
        return
    if problem:
        raise _unsafe(Path(lock_path), problem)


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
        try:
            descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK,
                                 0o600)
        except OSError as exc:
            if exc.errno in _REFUSED:
                check(lock_path)
            raise
        problem = _problem(os.fstat(descriptor))
        if problem:
            os.close(descriptor)
            raise _unsafe(lock_path, problem)
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
