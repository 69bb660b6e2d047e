"""Cross-process locks, one way for every stage: a lock file taken with `filelock` (flock on POSIX,
LockFileEx on Windows), so `import workbench`, ingestion and replay run on macOS and Windows as on
Linux. A lock is held by an open file, so a process that dies releases it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(lock_path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold the lock at `lock_path` (created with its folder, private) for the block; yields True.
    With `wait=False` it yields False at once when another holder has it, and holds nothing. Each
    call takes its own lock: two threads of one process exclude each other like two processes."""
    from filelock import FileLock, Timeout

    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path, mode=0o600)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def hold(lock_path: Path):
    """Take the lock at `lock_path` for as long as the returned object lives (a process that dies
    releases it); None when another holder has it."""
    from filelock import FileLock, Timeout

    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path, mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def held(lock_path: Path) -> bool:
    """Is the lock at `lock_path` held by some process (this one included) now?"""
    lock = hold(lock_path)
    if lock is None:
        return True
    lock.release()
    return False
