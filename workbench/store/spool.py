"""Recording without waiting on DuckDB: each process appends its records, as JSON lines, to a spool
file of its own; a background thread writes a batch every `flush_interval_s`. A crash loses at most
the batch not yet written (at most one interval); a torn last line is ignored by ingestion.

The application's thread only hands records over: encoding them, and any work a recorder defers
(`defer`), happen on the spool thread. Ingestion into DuckDB is the readers' job first — the
dashboard and every report ingest pending spools before they read — so a recording process only
starts a detached ingester now and then (`INGEST_EVERY_S`, less often while ingesters take long:
`INGEST_SHARE`; or after `INGEST_AFTER_RECORDS`) and at exit, or keeps one standing by that drains
its closed files as they fill (`stand_by`): DuckDB work in the application's
process would compete with it for the GIL. Only `workbench.flush()` (and `configure`) ingest in
process, because their caller waits for the store. Recording is fail-open: errors are logged once
and counted in `stats`, and the call goes on."""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson

from workbench.errors import WorkbenchError
from workbench.locks import check

log = logging.getLogger("workbench.store")

# records waiting for the spool thread: past this many, the appending thread writes them itself
# (back-pressure): each holds its call's bodies, and a spool thread behind on a loaded machine let an
# eval's queue grow with its cases
MAX_WAITING = 10_000
# ... and a process that cannot write its spool at all keeps this many, then drops
MAX_PENDING = 200_000
# the spool thread never wakes more often than this, whatever the setting says
MIN_FLUSH_INTERVAL_S = 0.01
# deferred work waiting past this many items wakes the spool thread before its interval ends: each
# holds a finished call's bodies and objects until it runs, and an app answered from a cassette
# defers a few hundred a tenth of a second (1,700 held 30 MB more at the peak of a replayed eval)
WAKE_AFTER_DEFERRED = 256
# ... and past this many, the deferring thread runs it itself (back-pressure): what waits is what a
# SIGKILL loses, and an app that makes calls faster than the spool thread records them (a tight loop of
# cassette answers on a loaded machine) held 19,000 calls, 4.7 s of them, far past `flush_interval_s`
MAX_DEFERRED = 4 * WAKE_AFTER_DEFERRED
# a recording process starts an ingester this often, or once this many records wait (an ingester
# costs a process start, about 0.4 s of CPU: fewer, larger batches)
INGEST_EVERY_S = 10.0
INGEST_AFTER_RECORDS = 20_000
# ... and at most every INGEST_SHARE x the last ingester's duration: an ingester judges its batch
# against the stored calls of the last minutes (insight's cache verdicts), so it takes longer as a
# long recording grows, and ingesters started every 10 s cost more than the recording itself
INGEST_SHARE = 10
# with an ingester standing by, the spool file is closed and handed to it to drain once this many
# bytes are in it: the one process, already started, ingests while the recording goes on, and the
# exit leaves it only the last file. An ingest batch's worth (ingest's BATCH_BYTES): what a batch
# costs besides its rows (insight's look back at the stored calls, the rollups' fold) grows with the
# store, so 2,000-record drains (2.3 MB) cost a 10,000-case eval's ingester twice the CPU
DRAIN_AFTER_BYTES = 8 * 1024 * 1024
# ... or once this many, when the standby has stored every file handed to it before: it does not wait
# idle while the file fills (a 1,000-case eval's 9 MB spool reached 8 MiB at its end, and all of its
# ingestion came after the exit), and it is never given a second file while it works on one, so a
# slow ingester (a large store, a busy machine) gets larger drains, up to DRAIN_AFTER_BYTES. At 1 MiB
# a 1,000-case eval's ingester spent 45% more CPU (a batch's fixed costs); at 4 MiB what main did
DRAIN_IDLE_AFTER_BYTES = 4 * 1024 * 1024
# ... or, near the end of a recording that says how far it is (`progress`: `workbench eval`'s cases),
# once the file holds as much as is still to come, down to this: the standby is kept busy to the end
# and the exit leaves it about the last part, not the 4 MiB file it was never given (a 1,000-case
# eval's second file reached 4 MiB at its exit). Below it a batch's fixed costs outweigh what it saves
DRAIN_TAIL_BYTES = 1024 * 1024


class Spool:
    def __init__(self, db_path: Path, spool_dir: Path, flush_interval_s: float) -> None:
        self.db_path = Path(db_path)
        self.spool_dir = Path(spool_dir)
        self.flush_interval_s = max(flush_interval_s, MIN_FLUSH_INTERVAL_S)
        self.stats: Counter[str] = Counter()
        self._pending: list[tuple[str, dict]] = []
        self._deferred: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        # reentrant: work deferred to a write may append records, and past the cap an append writes
        self._write_lock = threading.RLock()
        self._unwritable = False  # the last write failed
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False  # the thread is up: `append` checks only this (it runs for every record)
        self._file: Path | None = None
        os.register_at_fork(after_in_child=functools.partial(_forked, weakref.ref(self)))
        self._warned: set[str] = set()
        self._stopping = False
        # records written to the spool file that no ingestion has been tried on since: an idle
        # recorder does not open the store every interval
        self._to_ingest = 0
        self._ingested_at = time.monotonic()
        self._ingester: subprocess.Popen | None = None
        self._ingest_took = 0.0  # seconds the last detached ingester ran (as the spool thread saw it end)
        self._standby: subprocess.Popen | None = None  # the exit's ingester, started early (`stand_by`)
        self._drained: list[Path] = []  # files closed and handed to it to drain, named again at the end
        self._file_bytes = 0  # written to this process's file (since it was opened)
        self._spooled_bytes = 0  # written by this process, every file
        self._done: float | None = None  # how far the recording is, 0-1 (`progress`), when it says

    # called from any thread, on the application's path: hand over, nothing more
    def append(self, kind: str, row: dict) -> None:
        """Queue one record; `row` must not change afterwards (it is encoded later)."""
        with self._lock:
            full = len(self._pending) >= (MAX_PENDING if self._unwritable else MAX_WAITING)
            if not full:
                self._pending.append((kind, row))
        if full:
            self._append_when_full(kind, row)
        self._ensure_thread()

    def _append_when_full(self, kind: str, row: dict) -> None:
        """The spool thread is behind (a burst faster than it encodes): this thread writes what waits,
        then queues the record. Dropped (and counted) only when the file cannot be written."""
        if not self._unwritable:  # a failing file is retried by the spool thread, not on every append
            self.flush(ingest=False)
        with self._lock:
            if len(self._pending) < MAX_PENDING:
                self._pending.append((kind, row))
                return
            self.stats["dropped"] += 1

    def defer(self, work: Callable[[], None]) -> None:
        """Run `work` on the spool thread before the next write (it may `append` records)."""
        with self._lock:
            self._deferred.append(work)
            backlog = len(self._deferred)
        if backlog == WAKE_AFTER_DEFERRED:
            self._wake.set()
        elif backlog >= MAX_DEFERRED and not self._unwritable:  # a failing file is the spool thread's to retry
            self.flush(ingest=False)
        self._ensure_thread()

    def _run_deferred(self) -> None:
        while True:
            with self._lock:
                work, self._deferred = self._deferred, []
            if not work:
                return
            for item in work:
                try:
                    item()
                except Exception as exc:  # noqa: BLE001 - one bad record never stops the others
                    self._fail("record", exc)

    def _encode(self, batch: list[tuple[str, dict]]) -> list[bytes]:
        # orjson: encoding is most of what a recorder costs per record (10x the stdlib's speed)
        lines = []
        for kind, row in batch:
            try:
                lines.append(orjson.dumps({"kind": kind, "row": row}, default=str))
            except (TypeError, orjson.JSONEncodeError):
                lines.append(_encode_odd(kind, row))
        return lines

    def _ensure_thread(self) -> None:
        # stopped at exit: the exit flush writes what is left, on its own thread
        if self._running or self._stopping:
            return
        with self._lock:
            if not self._running:
                self._running = True
                self._thread = threading.Thread(target=self._run, name="workbench-spool", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._wake.wait(self.flush_interval_s)
                self._wake.clear()
                if not self._stopping:
                    self.flush(ingest=False)
                    every = max(INGEST_EVERY_S, INGEST_SHARE * self._ingester_took())
                    # with an ingester standing by, it drains the closed files: no process start
                    if self._standby is not None:
                        if self._file_bytes >= DRAIN_AFTER_BYTES or (
                                self._file_bytes >= self._idle_floor() and self._standby_idle()):
                            self._drain()
                    elif self._to_ingest and (time.monotonic() - self._ingested_at >= every
                                              or self._to_ingest >= INGEST_AFTER_RECORDS):
                        self._ingest_in_background()
        finally:
            self._running = False  # whatever ended it, the next record starts another

    def _ingester_took(self) -> float:
        """How long the last detached ingester ran; while it runs, how long it has run so far."""
        if self._ingester is not None and self._ingester.poll() is None:
            return time.monotonic() - self._ingester_started
        if self._ingester is not None:
            self._ingest_took, self._ingester = time.monotonic() - self._ingester_started, None
        return self._ingest_took

    def _ingest_in_background(self) -> None:
        """Ingest in a detached process, one at a time: DuckDB in the recording process would hold
        its GIL for as long as a batch takes (about a second per 5,000 records)."""
        if self._ingester is not None and self._ingester.poll() is None:
            return  # the last one is still at it; what it misses waits for the next
        self._to_ingest, self._ingested_at = 0, time.monotonic()
        try:
            # the drained files a standby that is gone left are this process's closed ones still
            self._ingester = _ingest_detached(self.db_path, self.spool_dir, self._drained)
            self._ingester_started = time.monotonic()
        except OSError as exc:
            self._fail("ingest", exc)

    def stand_by(self) -> None:
        """Start the ingester the exit will need now: its start-up (an interpreter, DuckDB, polars:
        most of what it costs for a small batch) runs while the process works, not after it ends.
        Meanwhile it drains this process's file each time DRAIN_AFTER_BYTES are in it, or
        DRAIN_IDLE_AFTER_BYTES once it stored the last (closed, and recording goes on into the
        next), the one ingester of a long recording; the exit hands it the last. A process that dies
        first (killed) or has nothing to ingest sends it no end: it leaves, what it drained stored,
        and the spool keeps the rest for the next ingestion."""
        if self._standby is not None:
            return
        try:
            self._standby = _ingest_detached(self.db_path, self.spool_dir, standby=True)
        except OSError as exc:
            self._fail("ingest", exc)

    def progress(self, done: int, total: int) -> None:
        """How far the recording is (`done` of `total` units of work, e.g. an eval's cases): near its
        end, an idle standby is handed what the file holds sooner (DRAIN_TAIL_BYTES)."""
        self._done = done / total if total > 0 else None

    def _idle_floor(self) -> int:
        """The bytes at which an idle standby is handed the file: as much as is still to come (by the
        bytes spooled so far and `progress`), between DRAIN_TAIL_BYTES and DRAIN_IDLE_AFTER_BYTES."""
        done = self._done
        if not done:
            return DRAIN_IDLE_AFTER_BYTES
        to_come = self._spooled_bytes * (1 - done) / done
        return int(min(DRAIN_IDLE_AFTER_BYTES, max(DRAIN_TAIL_BYTES, to_come)))

    def _standby_idle(self) -> bool:
        """The standby stored the last file drained to it (it removes a file once committed); one it
        skipped (the store another process's) stays, and the next drain waits for DRAIN_AFTER_BYTES."""
        return not self._drained or not self._drained[-1].exists()

    def _drain(self) -> None:
        """On the spool thread: close this process's file and hand it to the standing-by ingester,
        which ingests it while recording goes on into the next. A standby that is gone takes no more
        (detached ingesters do, as without one); the file stays in the spool, named at the end."""
        with self._write_lock:
            closed = self.close_file()
            if closed is None:
                return
            self._to_ingest, self._ingested_at = 0, time.monotonic()
            self._drained.append(closed)
            if not self._tell_standby(f"drain {closed.name}", end=False):
                self._standby = None

    def _tell_standby(self, words: str, end: bool) -> bool:
        """Send the standing-by ingester a line (`end`: its last); False when it is gone."""
        standby = self._standby
        if standby is None:
            return False
        try:
            standby.stdin.write(f"{words}\n".encode())
            if end:
                standby.stdin.close()
            else:
                standby.stdin.flush()
            return standby.poll() is None or standby.returncode == 0
        except OSError:  # it ended (killed, or failed to start): nothing was handed over
            return False

    def hand_over(self) -> None:
        """Write what is pending and give this process's files (the drained ones too) to the
        standing-by ingester (or to a detached one when none stands by), if there is anything to
        ingest; else dismiss the standby. Recording may go on afterwards: into a new file, for the
        next ingestion."""
        with self._write_lock:  # not beside a drain of the spool thread's
            self.flush(ingest=False)
            if self._to_ingest or self._ingester is not None or self._drained:
                # reset first: what is written from now on counts again (into this file or the next)
                self._to_ingest, self._ingester, self._ingested_at = 0, None, time.monotonic()
                closed = [*self._drained, *filter(None, [self.close_file()])]
                self._drained = []
                handed = self._tell_standby(" ".join(["ingest", *(path.name for path in closed)]), end=True)
                self._standby = None
                if not handed:
                    _ingest_detached(self.db_path, self.spool_dir, closed)
            else:
                self._dismiss_standby()

    def _dismiss_standby(self) -> None:
        standby, self._standby = self._standby, None
        if standby is not None:
            try:
                standby.stdin.close()  # end of input without a word: it leaves without ingesting
            except OSError:
                pass

    def stop(self) -> None:
        """End the background thread (at exit: DuckDB must not run in a thread while Python ends)."""
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=30)

    def _path(self) -> Path:
        if self._file is None:
            # folders we create are the owner's only (the store's, `.workbench/`, usually among them)
            self.spool_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.spool_dir.mkdir(mode=0o700, exist_ok=True)
            name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
            self._file = self.spool_dir / name
            try:  # the ingesters this process starts would refuse the lock, with no one to tell
                check(self.spool_dir / ".ingest.lock")
            except WorkbenchError as exc:
                self._fail("ingest", exc)
        return self._file

    def flush(self, ingest: bool = True, wait: bool = False) -> None:
        """Write pending records to this process's spool file, then (optionally) ingest spools:
        without `wait` only when this process wrote some and the store is free; with it, every
        spool, waiting for a store another process holds (`workbench.flush()`)."""
        with self._write_lock:
            self._run_deferred()
            with self._lock:
                batch, self._pending = self._pending, []
            lines = self._encode(batch)
            if lines:
                try:
                    data = b"\n".join([*lines, b""])  # one copy, ending in a newline
                    fd = os.open(self._path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    try:
                        view = memoryview(data)
                        while view:  # one write per batch (appended whole or torn at the end), unless short
                            view = view[os.write(fd, view):]
                    finally:
                        os.close(fd)
                    self.stats["written"] += len(lines)
                    self._file_bytes += len(data)
                    self._spooled_bytes += len(data)
                    self._to_ingest += len(lines)
                    self._unwritable = False
                except OSError as exc:
                    self._unwritable = True
                    self._fail("write", exc)
                    with self._lock:  # keep them for the next try, oldest first, as many as may wait
                        kept = max(0, min(len(batch), MAX_PENDING - len(self._pending)))
                        self._pending[:0] = batch[:kept]
                        self.stats["dropped"] += len(batch) - kept
                    return
        if ingest and (self._to_ingest or wait):
            from workbench.store.ingest import ingest_spools, try_ingest

            # counted as done before it runs: a record written meanwhile is counted again
            waiting, self._to_ingest = self._to_ingest, 0
            self._ingested_at = time.monotonic()
            try:
                if wait:
                    ingest_spools(self.db_path, self.spool_dir, wait=True)
                    self._ingester = None  # what a detached one left is in too: none is due at exit
                elif try_ingest(self.db_path, self.spool_dir) is None:
                    self._to_ingest = waiting  # another process holds the store: try again later
            except Exception as exc:  # noqa: BLE001 - fail-open: the spool keeps the records
                self._to_ingest = waiting
                self._fail("ingest", exc)

    def close_file(self) -> Path | None:
        """End this process's spool file (what it wrote so far; a later write starts another), to
        hand it over to an ingester that may then remove it. None: it wrote none."""
        with self._write_lock:
            closed, self._file, self._file_bytes = self._file, None, 0
        return closed if closed is not None and closed.exists() else None

    def note_failure(self, what: str, exc: BaseException) -> None:
        """Count a failure of a recording step, and log the first of each kind."""
        self._fail(what, exc)

    def _fail(self, what: str, exc: BaseException) -> None:
        self.stats[f"{what}_errors"] += 1
        if what not in self._warned:
            self._warned.add(what)
            log.warning("workbench could not %s recorded data (kept for retry where possible): %s", what, exc)


def _encode_odd(kind: str, row: dict) -> bytes:
    """A record orjson refuses (an integer past 64 bits, a key that is not text): the standard
    library writes it, and ingestion quarantines what its table cannot hold; whatever cannot be
    written as JSON at all is spooled as a quarantine record, so it is never silently dropped."""
    try:
        return json.dumps({"kind": kind, "row": row}, default=str, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        return orjson.dumps({"kind": "quarantine", "row": {
            "quarantine_id": uuid.uuid4().hex, "kind": kind, "reason": f"cannot be written as JSON: {exc}",
            "record": repr(row)[:65536], "quarantined_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        }})


def _forked(spool_ref: weakref.ref) -> None:
    """In a forked child: no spool thread came along, and a lock another thread held stays held;
    the child starts its own thread and writes its own file."""
    spool = spool_ref()
    if spool is not None:
        spool._lock, spool._write_lock = threading.Lock(), threading.RLock()
        spool._running, spool._thread, spool._file, spool._ingester = False, None, None, None
        spool._file_bytes = 0
        spool._standby, spool._drained = None, []  # the parent's: only the parent hands them over
        spool._spooled_bytes, spool._done = 0, None


_spools: dict[tuple[Path, Path], Spool] = {}
_spools_lock = threading.Lock()


def spool_for(db_path: Path, spool_dir: Path, flush_interval_s: float) -> Spool:
    key = (Path(db_path).resolve(), Path(spool_dir).resolve())
    with _spools_lock:
        if key not in _spools:
            _spools[key] = Spool(db_path, spool_dir, flush_interval_s)
        return _spools[key]


def flush_all(ingest: bool = True) -> None:
    for spool in list(_spools.values()):
        spool.flush(ingest=ingest)


_exit_hooks: list[Callable[[], None]] = []


def before_exit_flush(hook: Callable[[], None]) -> None:
    """Run `hook` at exit before the last write (capture records the calls still in flight)."""
    _exit_hooks.append(hook)


def _flush_at_exit() -> None:
    """Write what is pending, then leave ingestion to a detached process, so an exiting program
    (a CLI command, a CI job) does not wait on DuckDB; readers ingest before they read anyway."""
    for hook in _exit_hooks:
        try:
            hook()
        except Exception:  # noqa: BLE001 - never fail an exiting application
            pass
    for spool in list(_spools.values()):
        spool.stop()
    for spool in list(_spools.values()):
        try:
            spool.hand_over()
        except Exception:  # noqa: BLE001 - never fail an exiting application
            pass


# an ingester leaves by os._exit once its store is closed: the interpreter's teardown (DuckDB's and
# polars' modules) is ~3% of a 1,000-case eval's ingest, after its results are in
_INGEST_CODE = "import os, sys; from workbench.store.ingest import ingest_spools; ingest_spools(sys.argv[1], sys.argv[2], " \
               "closed=sys.argv[3:], own_process=True); os._exit(0)"
# standing by: imported, then one line from its parent, `ingest [FILE]`; end of input without it
# (the parent was killed, or had nothing to ingest) ends it without touching the store
_STANDBY_CODE = "import os, sys; from workbench.store.ingest import ingest_spools_when_told; " \
                "ingest_spools_when_told(sys.argv[1], sys.argv[2]); os._exit(0)"


def _ingest_detached(db_path: Path, spool_dir: Path, closed: list[Path] = (),
                     standby: bool = False) -> subprocess.Popen:
    """An ingester of its own session. `closed`: the recording process's files it will write no more
    (the exiting one's, those it drained), handed over so that the ingester removes them once read,
    though the process may still be running or exiting (they were left behind, read to their end,
    for the next ingester to find their writer gone). `standby`: one that waits for its parent's
    words on its input (`Spool.stand_by`)."""
    return subprocess.Popen(
        [sys.executable, "-c", _STANDBY_CODE if standby else _INGEST_CODE, str(db_path), str(spool_dir),
         *(path.name for path in closed)],
        start_new_session=True,
        stdin=subprocess.PIPE if standby else subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def ingesters_of(db_path) -> dict[int, str]:
    """The ingesters Workbench started for the store at `db_path` (detached or standing by) that
    are still running, by pid: their command lines. Linux's /proc; elsewhere none are seen."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:  # it ended while we looked
            continue
        if str(db_path).encode() in args and any(b"ingest_spools" in arg for arg in args):
            found[int(cmdline.parent.name)] = " ".join(arg.decode(errors="replace") for arg in args)
    return found


# Flush before the interpreter starts to finalize (DuckDB refuses to scan Python objects then):
# threading's exit hooks run first, while the interpreter is whole; plain atexit is the fallback.
try:
    threading._register_atexit(_flush_at_exit)
except (AttributeError, RuntimeError):  # pragma: no cover - another Python, or already shutting down
    atexit.register(_flush_at_exit)
