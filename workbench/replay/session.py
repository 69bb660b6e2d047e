"""One cassette in use: its recordings indexed, the mode it is used in, what was played (for the
stale-recording check) and what was recorded (saved atomically, merged under a file lock so several
test workers can record into one cassette at once).

Options that exist for pytest-recording's sake (`workbench.replay.pytest_vcr`) are generic here:
`also` (more cassettes to replay from, never written), `match_body=False` (vcrpy's default matchers
ignore the body), `filters` (vcrpy's `before_record_*` hooks and `filter_*` options) and
`documents` (filled with each file's document as parsed, so vcrpy need not parse it again)."""

from __future__ import annotations

import atexit
import gc
import hashlib
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from workbench.config import RecordMode, settings
from workbench.errors import WorkbenchError
from workbench.locks import exclusive
from workbench.replay.cassette import (
    MAX_CASSETTE_BYTES, Interaction, RecordedRequest, RecordedResponse, StreamedInteractions, encoded_interaction,
    format_of, load_cassette_with_document, parse_cassette_with_meta, write_cassette,
)
from workbench.replay.matcher import CassetteIndex, interaction_hash
from workbench.replay.scrub import BodyHook, scrub

MODES = ("replay", "record", "rerecord", "live")
SAVE_EACH_UP_TO = 200  # interactions; past that, a recording session saves at most every SAVE_EVERY_S
SAVE_EVERY_S = 1.0
STREAM_FROM_BYTES = 8 * 1024 * 1024  # a replayed JSON cassette from this size is read one interaction at a time
SAVE_SHARE = 10  # ... and at most every SAVE_SHARE x the last save's duration, so saving stays a small share
# one replay run: this process, or every worker of one pytest-xdist run
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}-{int(datetime.now(timezone.utc).timestamp())}"
_open: weakref.WeakSet[Cassette] = weakref.WeakSet()
log = logging.getLogger("workbench.replay")


def _working(cassette: Path, folder: str, suffix: str, work_dir: Path | None = None) -> Path:
    """A file of the store's working folder (`work_dir`: looked up when not given) kept for a
    cassette (never beside the committed file)."""
    if work_dir is None:
        from workbench.capture.recorder import recorder

        work_dir = recorder().settings.work_dir
    return _working_of(Path(cassette).resolve(), folder, suffix, work_dir)


def _working_of(resolved: Path, folder: str, suffix: str, work_dir: Path) -> Path:
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:16]
    return work_dir / folder / f"{key}{suffix}"


def played_record_path(cassette: Path) -> Path:
    """Where the last replay run's played interactions are kept."""
    return _working(cassette, "replay", ".json")


class RecordFilter(Protocol):
    """Rewrites what is matched and recorded (headers, query, body), before Workbench's own scrubbing."""

    def request(self, request: RecordedRequest) -> RecordedRequest | None:
        """The request as matched and recorded; None: it bypasses the cassette (sent, not recorded)."""

    def response(self, response: RecordedResponse) -> RecordedResponse | None:
        """The response as recorded; None: not recorded."""


class Cassette:
    def __init__(self, path: Path | str, mode: RecordMode | None = None, body_hook: BodyHook | None = None, *,
                 also: Sequence[Path | str] = (), match_body: bool = True, filters: RecordFilter | None = None,
                 documents: dict[Path, dict] | None = None) -> None:
        self.path = Path(path)
        self.mode: RecordMode = mode or settings().record_mode
        self.played_at_end = False  # True: what it played is written by write_played_records()
        self._played_kept = -1  # how many recordings it had played when it last kept its played record
        if self.mode not in MODES:
            raise WorkbenchError(
                "WB_CONFIG_INVALID", f"record mode {self.mode!r}", f"use one of: {', '.join(MODES)}"
            )
        self.body_hook = body_hook
        self.session = uuid.uuid4().hex  # this load: its replays are one cache lineage, apart from other loads
        # False: a request whose body matches no recording replays the next unplayed recording of the
        # same method and path, as vcrpy's default matchers (no body among them) would
        self.match_body = match_body
        self.filters = filters
        self.misses: list[WorkbenchError] = []
        self.recorded = 0
        self.matched_without_body = 0
        self._saved_at = time.monotonic()
        self._save_took = 0.0  # seconds: a save merges with the file on disk, so it grows with the cassette
        self._lock = threading.Lock()
        interactions: list[Interaction] = []
        hashes = None
        # a load allocates a few objects per interaction and frees none: collecting meanwhile only costs time
        collecting = gc.isenabled()
        gc.disable()
        try:
            if self._streams(also):
                interactions = StreamedInteractions(self.path, scrub)
                hashes = interactions.meta.get("request_hashes")
            elif self.mode in ("replay", "record") and self.path.exists():
                loaded, meta, document = load_cassette_with_document(self.path)
                if documents is not None:
                    documents[self.path] = document
                interactions = [scrub(item) for item in loaded]
                hashes = meta.get("request_hashes")
            if not isinstance(hashes, list) or len(hashes) != len(interactions):
                hashes = None
            self.own = len(interactions)  # the recordings of this file; those of `also` follow them
            for extra in map(Path, also if self.mode in ("replay", "record") else ()):
                if extra.exists() and extra.resolve() != self.path.resolve():
                    loaded, _, document = load_cassette_with_document(extra)
                    if documents is not None:
                        documents[extra] = document
                    more = [scrub(item) for item in loaded]
                    hashes = (hashes or [None] * len(interactions)) + [None] * len(more)
                    interactions += more
            self.index = CassetteIndex(interactions, hashes)
        finally:
            if collecting:
                gc.enable()
        self._new: list[Interaction] = []
        self._save_failure_logged = False
        # the file as this session last wrote it: (its stat, its recordings, their hashes, their JSON
        # text); while the file is still that one, a save appends to these instead of reading,
        # scrubbing and encoding it again
        self._written: tuple[tuple, list[Interaction], list[str], list[bytes] | None] | None = None
        _open.add(self)

    def _streams(self, also: Sequence) -> bool:
        """Replay a large JSON cassette from the file, one interaction at a time, rather than
        holding it whole (170 MB for the 25 MB cassette of a 10,000-case suite)."""
        if self.mode != "replay" or also or format_of(self.path) != "json":
            return False
        try:
            return self.path.is_file() and MAX_CASSETTE_BYTES >= self.path.stat().st_size >= STREAM_FROM_BYTES
        except OSError:
            return False

    # clients bound to this cassette (recorded by capture as well)
    def http_client(self, **kwargs):
        from workbench.replay.clients import http_client

        return http_client(self, **kwargs)

    def async_http_client(self, **kwargs):
        from workbench.replay.clients import async_http_client

        return async_http_client(self, **kwargs)

    def httpx_client(self, **kwargs):
        from workbench.replay.clients import httpx_client

        return httpx_client(self, **kwargs)

    def async_httpx_client(self, **kwargs):
        from workbench.replay.clients import async_httpx_client

        return async_httpx_client(self, **kwargs)

    def origin(self, index: int) -> dict:
        """Response extensions naming where recording `index` came from (a cassette: none beyond
        its path; an earlier run in the store names the call that paid)."""
        return {}

    def record(self, interaction: Interaction) -> None:
        """Keep a new recording, and write the file: at once while the cassette is small, at most
        once a second once it is large, and less often still as a save grows slow (rewriting it per
        interaction made recording quadratic; so did a save every second of a 10 MB cassette, 5,000
        answers of 1,000 cases x 5 epochs); `save()` at the end of a test, a suite, a client or the
        process writes the rest."""
        clean = scrub(interaction, self.body_hook)
        with self._lock:
            self.index.add(clean)
            self._new.append(clean)
            self.recorded += 1
            every = max(SAVE_EVERY_S, SAVE_SHARE * self._save_took)
            due = len(self.index.interactions) <= SAVE_EACH_UP_TO or time.monotonic() - self._saved_at >= every
        if due:
            self.save_or_log()

    def save(self) -> None:
        """Merge what this process recorded into the file on disk, atomically, under a lock. A file
        that cannot be written (a full disk, a read-only folder) is WB_CASSETTE_UNWRITABLE, and
        what was not written stays in memory for the next save."""
        with self._lock:
            new, self._new = self._new, []
            self._saved_at = time.monotonic()
        if not new and self.mode != "rerecord":
            self._save_played()
            return
        started = time.monotonic()
        try:
            self._merge(new)
        except WorkbenchError:  # a refused lock file (WB_LOCK_UNSAFE): kept for the next save too
            with self._lock:
                self._new[:0] = new
            raise
        except OSError as exc:
            with self._lock:
                self._new[:0] = new
            raise WorkbenchError(
                "WB_CASSETTE_UNWRITABLE",
                f"{len(self._new)} new recordings could not be written to {self.path}: {exc.strerror or exc}",
                "free space on that disk or make the folder writable; the next save (the next recording, "
                "closing the client, the process's exit) writes them",
            ) from exc
        finally:
            self._save_took = time.monotonic() - started

    def save_or_log(self) -> None:
        """`save()` for the application's own path (a recorded call, a client closing, the
        process exiting), which recording must never break: a failure is logged once per cassette
        and the recordings stay pending."""
        try:
            self.save()
        except WorkbenchError as exc:
            if not self._save_failure_logged:
                self._save_failure_logged = True
                log.warning("workbench: %s", exc)

    def _merge(self, new: list[Interaction]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(_working(self.path, "locks", ".cassette.lock")):
            written = {"request_hashes": None}
            if self.mode == "rerecord":
                # what this run rerecorded (its pytest-xdist workers, its earlier sessions) is kept;
                # anything older is what rerecord replaces
                written["rerecorded_in"] = _RUN
            on_disk, stored, encoded = self._on_disk()
            if on_disk is None:
                on_disk, stored, encoded = [], [], []
            elif self.mode == "rerecord" and not new:
                return  # what this run rerecorded is in the file already
            merged = on_disk + new
            # stored hashes are kept (not rehashed on every save), an older version's recomputed
            hashes = [interaction_hash(item, digest) for item, digest in zip(merged, stored + [None] * len(new))]
            written["request_hashes"] = hashes
            if format_of(self.path) == "json":
                encoded = (encoded if encoded is not None else [encoded_interaction(item) for item in on_disk]) \
                    + [encoded_interaction(item) for item in new]
            else:
                encoded = None
            write_cassette(self.path, merged, written, encoded)
            self._written = (_signature(self.path), merged, hashes, encoded)
        self._save_played()

    def _on_disk(self) -> tuple[list[Interaction] | None, list[str | None], list[bytes] | None]:
        """The recordings in the file, scrubbed, their stored hashes (None where unknown) and their
        JSON text when this session wrote them, under the cassette's lock: from memory while the
        file is the one this session wrote last (saving by reading, scrubbing and rewriting the
        whole file made recording quadratic); None: nothing to keep (no file, or a rerecord
        replacing what an earlier run recorded)."""
        if not self.path.exists():
            return None, [], None
        if self._written is not None and self._written[0] == _signature(self.path):
            return self._written[1], self._written[2], self._written[3]
        on_disk, meta = parse_cassette_with_meta(self.path.read_bytes(), str(self.path))
        if self.mode == "rerecord" and meta.get("rerecorded_in") != _RUN:
            return None, [], None
        stored = meta.get("request_hashes")
        return [scrub(item) for item in on_disk], stored if isinstance(stored, list) and len(stored) == len(on_disk) \
            else [None] * len(on_disk), None

    def _save_played(self) -> None:
        """What this session played, written now or, for a session of a test suite, kept and written
        once when the suite ends (`played_at_end`): a file lock and a rewrite per test cost more than
        the test's replay."""
        if self.mode != "replay" or not self.path.exists():
            return
        played = {index for index in self.index.played if index < self.own}
        if not self.played_at_end:
            _write_played({self.path: (self.own, played)})
            return
        if len(played) == self._played_kept:
            return  # kept already: a suite's sessions are saved again at exit, and would each be rewritten
        self._played_kept = len(played)
        with _played_lock:
            own, before = _played_unwritten.get(self.path, (self.own, set()))
            _played_unwritten[self.path] = (self.own, played | before if own == self.own else played)


_played_lock = threading.Lock()
_played_unwritten: dict[Path, tuple[int, set[int]]] = {}  # cassette -> (its interactions, those played)


def write_played_records() -> None:
    """Write what the sessions kept for the end of a test suite played (see `Cassette.played_at_end`)."""
    with _played_lock:
        unwritten = dict(_played_unwritten)
        _played_unwritten.clear()
    if unwritten:
        _write_played(unwritten)


def _write_played(cassettes: dict[Path, tuple[int, set[int]]]) -> None:
    """For each cassette (its interactions, those played), merge what it played with what other
    sessions of the same run played (a test suite opens one session per test, and pytest-xdist
    workers share one run id), atomically. One lock for every cassette's record: a suite's end
    writes a thousand of them, and a lock each cost more than the writes."""
    from workbench.capture.recorder import recorder

    work_dir = recorder().settings.work_dir
    try:
        (work_dir / "replay").mkdir(parents=True, exist_ok=True)
        with exclusive(work_dir / "locks" / "played.lock"):
            folders: dict[Path, Path] = {}
            for path, (own, played) in cassettes.items():
                try:
                    resolved = _resolved(path, folders)
                    _merge_played(resolved, _working_of(resolved, "replay", ".json", work_dir), own, played)
                except OSError:
                    pass  # the stale check is advisory; replay itself must not fail on it
    except (OSError, WorkbenchError):  # WorkbenchError: a refused lock file (WB_LOCK_UNSAFE)
        pass


def _resolved(path: Path, folders: dict[Path, Path]) -> Path:
    """`path.resolve()`, each folder resolved once (`folders`): a suite's end resolves a thousand
    cassettes in a few folders, and a resolve is a system call per part of the path. A cassette that
    is itself a link is resolved whole."""
    if path.is_symlink():
        return path.resolve()
    folder = folders.get(path.parent)
    if folder is None:
        folder = folders[path.parent] = path.parent.resolve()
    return folder / path.name


def _merge_played(resolved: Path, record: Path, own: int, played: set[int]) -> None:
    try:
        previous = json.loads(record.read_text())
        if previous.get("run") == _RUN and previous.get("interactions") == own:
            played = played | set(previous.get("played", []))
    except (OSError, ValueError, AttributeError):
        pass
    temporary = record.with_name(f".{record.name}.{os.getpid()}")
    temporary.write_text(json.dumps({
        "cassette": str(resolved), "at": datetime.now(timezone.utc).isoformat(), "run": _RUN,
        "interactions": own, "played": sorted(played),
    }))
    os.replace(temporary, record)


def _signature(path: Path) -> tuple:
    """What tells one version of a file from another: a save replaces the file (a new inode)."""
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


@atexit.register
def _save_all() -> None:
    for cassette in list(_open):
        try:
            cassette.save()
        except WorkbenchError as exc:  # the last chance: said even if a save failed before
            log.warning("workbench: %s", exc)
        except Exception:  # noqa: BLE001 - never fail an exiting process
            pass
    try:
        write_played_records()
    except Exception:  # noqa: BLE001 - never fail an exiting process
        pass
