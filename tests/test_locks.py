"""Cross-process locks (`workbench.locks`): exclusive across processes and between threads, private,
released when the holder lets go, and on POSIX taken without importing filelock."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from workbench.locks import exclusive, hold, held

posix = pytest.mark.skipif(os.name != "posix", reason="flock is POSIX's")


def _held_elsewhere(path) -> bool:
    code = f"from workbench.locks import held; print(held({str(path)!r}))"
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return answer.strip() == "True"


def test_a_lock_excludes_other_processes_and_threads_until_released(tmp_path):
    path = tmp_path / "locks" / "x.lock"
    with exclusive(path) as acquired:
        assert acquired and held(path) and _held_elsewhere(path)
        other: list[bool] = []
        thread = threading.Thread(target=lambda: other.append(held(path)))
        thread.start()
        thread.join()
        assert other == [True]
        with exclusive(path, wait=False) as again:
            assert again is False
    assert not held(path) and not _held_elsewhere(path)


def test_a_waiting_lock_is_taken_once_the_holder_releases_it(tmp_path):
    path = tmp_path / "x.lock"
    first = hold(path)
    taken = threading.Event()

    def wait_for_it():
        with exclusive(path):
            taken.set()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    assert not taken.wait(0.2)
    first.release()
    thread.join(10)
    assert taken.is_set()


def test_a_held_lock_lives_as_long_as_its_object(tmp_path):
    path = tmp_path / "x.lock"
    lock = hold(path)
    assert lock is not None and hold(path) is None and _held_elsewhere(path)
    del lock
    assert not held(path)


@posix
def test_the_lock_file_is_private(tmp_path):
    path = tmp_path / "x.lock"
    with exclusive(path):
        assert path.stat().st_mode & 0o777 == 0o600


@posix
def test_on_posix_filelock_is_not_imported(tmp_path):
    # its import is ~60 M instructions, a fifth of what Workbench's imports add to a pytest session
    code = ("import sys; from workbench.locks import exclusive, held\n"
            f"with exclusive({str(tmp_path / 'x.lock')!r}): pass\n"
            f"held({str(tmp_path / 'y.lock')!r})\n"
            "print('filelock' in sys.modules)")
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert answer.strip() == "False"


@posix
def test_a_lock_dropped_while_the_interpreter_exits_is_released_quietly(tmp_path):
    """At exit the interpreter clears modules' names before it drops what they still hold (a pytest
    worker printed "Exception ignored in _Flock.__del__"): a lock dropped then still closes its file,
    and so is released, with nothing on stderr."""
    path = tmp_path / "x.lock"
    code = (f"import os\nfrom workbench import locks\nlock = locks.hold({str(path)!r})\n"
            "descriptor = lock._descriptor\n"
            "locks.os = locks.fcntl = None  # as the interpreter's exit leaves the module\n"
            "del lock\n"
            "try:\n    os.fstat(descriptor)\n    print('open')\nexcept OSError:\n    print('closed')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (done.stdout.strip(), done.stderr) == ("closed", "")
    assert not _held_elsewhere(path)
