"""Record ids: 128 random bits as 32 hex characters, like a uuid4's hex.

`uuid.uuid4()` reads `os.urandom` on every call, a system call that releases the GIL on the
application's hot path; this generator is seeded from it once per process (again in a forked child)
and is never affected by the application seeding `random`."""

from __future__ import annotations

import os
import random

_generator = random.Random()
os.register_at_fork(after_in_child=_generator.seed)


def new_id() -> str:
    return f"{_generator.getrandbits(128):032x}"
