"""The cassette index: canonical request hash → recordings in recorded order, built once per
cassette, so a request is answered in constant time however large the cassette (vcrpy scans every
recording for every request). A miss explains itself: the closest recording and the first field
that differs, with a short diff for text."""

from __future__ import annotations

import difflib
import heapq
import json
import re
import threading
from bisect import insort
from collections import defaultdict
from urllib.parse import urlsplit

from workbench.replay.cassette import Interaction
from workbench.wire.canonical import HASH_VERSION, canonical_body, request_hash


def _trusted(stored: str | None) -> bool:
    return isinstance(stored, str) and stored.startswith(HASH_VERSION + ":")


def interaction_hash(interaction: Interaction, stored: str | None = None) -> str:
    if _trusted(stored):
        return stored
    return request_hash(interaction.request.method, interaction.request.uri, interaction.request.body)


class CassetteIndex:
    """Recordings by request hash; identical requests replay in recorded order, each once."""

    def __init__(self, interactions: list[Interaction], hashes: list[str | None] | None = None) -> None:
        self.interactions = interactions
        # a stored hash spares reading its recording (a streamed cassette reads it from the file)
        self.hashes = [interaction_hash(interactions[index], stored) if not _trusted(stored) else stored
                       for index, stored in enumerate(hashes or [None] * len(interactions))]
        self._by_hash: dict[str, list[int]] = defaultdict(list)
        for index, digest in enumerate(self.hashes):
            self._by_hash[digest].append(index)
        self._next: dict[str, int] = defaultdict(int)
        self.played: set[int] = set()
        self.repeated = 0  # requests answered by a recording already played (more asked than recorded)
        self._lock = threading.Lock()
        self._stored_trusted = hashes is not None  # until a miss makes us look again
        self._words: list[frozenset[bytes]] = []  # word sets of request bodies, built at the first miss
        self._by_route: dict[tuple[str, str], list[int]] | None = None  # built at the first take_route
        self._route_next: dict[tuple[str, str], int] = defaultdict(int)

    def take(self, digest: str, repeat: bool = True) -> int | None:
        """The next unplayed recording of `digest`; once all are played, the last one again when
        `repeat` (replay mode), else None (record mode: a retry of a recorded error is missing)."""
        with self._lock:
            indices = self._by_hash.get(digest)
            if not indices and self._stored_trusted:
                self._rehash()
                indices = self._by_hash.get(digest)
            if not indices:
                return None
            position = self._next[digest]
            if position >= len(indices) and not repeat:
                return None
            index = indices[min(position, len(indices) - 1)]
            self.repeated += position >= len(indices)
            self._next[digest] = position + 1
            self.played.add(index)
            return index

    def take_route(self, method: str, url: str) -> int | None:
        """The first unplayed recording of the same method and path, whatever its body (vcrpy's
        default matching, which plays each recording once)."""
        with self._lock:
            if self._by_route is None:
                self._by_route = defaultdict(list)
                for index, interaction in enumerate(self.interactions):
                    self._by_route[_route(interaction.request.method, interaction.request.uri)].append(index)
            route = _route(method, url)
            indices = self._by_route.get(route, [])
            position = self._route_next[route]  # what lies before it is played: played only grows
            while position < len(indices) and indices[position] in self.played:
                position += 1
            self._route_next[route] = position
            if position == len(indices):
                return None
            self.played.add(indices[position])
            return indices[position]

    def _rehash(self) -> None:
        """Also index each recording by the hash of the request it holds now (once, at the first
        miss): the stored hashes are trusted for speed, and a request edited by hand keeps its old
        one in the file."""
        self._stored_trusted = False
        for index, interaction in enumerate(self.interactions):
            digest = interaction_hash(interaction)
            if digest != self.hashes[index]:
                insort(self._by_hash[digest], index)

    def add(self, interaction: Interaction) -> int:
        with self._lock:
            self.interactions.append(interaction)
            digest = interaction_hash(interaction)
            self.hashes.append(digest)
            index = len(self.interactions) - 1
            self._by_hash[digest].append(index)
            self._next[digest] = len(self._by_hash[digest])  # just recorded = already played
            if self._by_route is not None:
                self._by_route[_route(interaction.request.method, interaction.request.uri)].append(index)
            self.played.add(index)
            return index

    def closest(self, method: str, url: str, body: bytes) -> tuple[Interaction | None, str]:
        """The recording most like the request, and a description of the first difference.

        Two passes, so a miss answers quickly in a cassette of thousands: every recording is ranked
        by method, path and the overlap of the words of its body (word sets are built once per
        index), then the few best are compared character by character on their canonical JSON."""
        if not self.interactions:
            return None, "the cassette has no recordings"
        method, path = method.upper(), urlsplit(url).path
        words = self._word_sets()
        wanted_words = _words(body)

        def coarse(index: int) -> float:
            request = self.interactions[index].request
            other = words[index]
            union = len(other | wanted_words) or 1
            return (request.method == method) + 2 * (_path(request.uri) == path) + len(other & wanted_words) / union

        candidates = heapq.nlargest(_REFINED, range(len(self.interactions)), key=coarse)
        wanted = canonical_body(body)
        matcher = difflib.SequenceMatcher(None, b=json.dumps(wanted, sort_keys=True)[:4000], autojunk=False)

        def fine(index: int) -> float:
            request = self.interactions[index].request
            matcher.set_seq1(json.dumps(canonical_body(request.body), sort_keys=True)[:4000])
            return (request.method == method) + 2 * (_path(request.uri) == path) + matcher.quick_ratio()

        best = self.interactions[max(candidates, key=lambda index: (fine(index), -index))]
        if best.request.method != method:
            return best, f"method: recorded {best.request.method}, requested {method}"
        if _path(best.request.uri) != path:
            return best, f"path: recorded {_path(best.request.uri)}, requested {path}"
        return best, first_difference(canonical_body(best.request.body), wanted)

    def _word_sets(self) -> list[frozenset[bytes]]:
        with self._lock:
            cached = self._words
            for interaction in self.interactions[len(cached):]:
                cached.append(_words(interaction.request.body))
            return cached


_REFINED = 8  # recordings compared character by character after the word ranking
_WORD = re.compile(rb"[A-Za-z0-9_]+")


def _words(body: bytes) -> frozenset[bytes]:
    return frozenset(_WORD.findall(body[:65536]))


def _path(uri: str) -> str:
    return urlsplit(uri).path


def _route(method: str, uri: str) -> tuple[str, str]:
    return method.upper(), _path(uri)


def first_difference(recorded, requested, where: str = "body") -> str:
    """The first JSON path where two values differ, with a short diff when both are text."""
    if isinstance(recorded, dict) and isinstance(requested, dict):
        for key in sorted(set(recorded) | set(requested)):
            if key not in recorded:
                return f"{where}.{key}: not recorded, requested {_short(requested[key])}"
            if key not in requested:
                return f"{where}.{key}: recorded {_short(recorded[key])}, not in the request"
            if recorded[key] != requested[key]:
                return first_difference(recorded[key], requested[key], f"{where}.{key}")
    elif isinstance(recorded, list) and isinstance(requested, list):
        for index, (left, right) in enumerate(zip(recorded, requested)):
            if left != right:
                return first_difference(left, right, f"{where}[{index}]")
        if len(recorded) != len(requested):
            return f"{where}: recorded {len(recorded)} items, requested {len(requested)}"
    elif isinstance(recorded, str) and isinstance(requested, str):
        diff = difflib.unified_diff(recorded.splitlines() or [""], requested.splitlines() or [""], "recorded", "requested", lineterm="", n=0)
        lines = [line for line in diff if not line.startswith(("---", "+++", "@@"))][:6]
        return f"{where}:\n    " + "\n    ".join(_short(line, 160) for line in lines)
    if recorded != requested:
        return f"{where}: recorded {_short(recorded)}, requested {_short(requested)}"
    return "no difference in method, path or body (the recording was already played)"


def _short(value, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
