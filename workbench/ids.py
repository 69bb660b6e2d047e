"""Record ids: 32 hex characters, like a uuid7's: the creation time in milliseconds (48 bits) then
80 random bits.

Time first so the ids a batch stores are neighbours in the primary keys' ART indexes: a commit
inserting random (uuid4-like) keys touched every node of the index and had to load all of it, so
the ingester's memory grew with the store (~1.2 KB a case); time-ordered keys touch the index's
right edge only (benchmarks/RESULTS.md, ingmem3). 80 random bits keep ids unique and unguessable.

`uuid.uuid4()` reads `os.urandom` on every call, a system call that releases the GIL on the
application's hot path; this generator is seeded from it once per process (again in a forked child)
and is never affected by the application seeding `random`."""

from __future__ import annotations

import os
import random
import time

_generator = random.Random()
os.register_at_fork(after_in_child=_generator.seed)


def new_id() -> str:
    return f"{time.time_ns() // 1_000_000:012x}{_generator.getrandbits(80):020x}"
