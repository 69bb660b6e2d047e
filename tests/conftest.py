"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from workbench.demo.fake_server import FakeServer
from workbench.demo.fake_provider import FakeProvider

try:  # the client environments of .ci/run install no hypothesis
    from hypothesis import HealthCheck, settings
except ImportError:
    pass
else:
    # Speed is measured in benchmarks, never asserted: a per-example deadline or a "generation is
    # too slow" check fails a correct property on a loaded machine (CI runs two suites on 2 cores).
    settings.register_profile("workbench", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("workbench")

try:
    # LiteLLM imports the importlib_metadata backport, which on its first import deletes the
    # stdlib's `PathFinder.find_distributions` for good and puts its own finder on sys.meta_path.
    # When that first import happens inside a pytester in-process run, the run's end restores
    # sys.meta_path without that finder: no distribution is found by any later test of the worker
    # ("No package metadata was found for httpcore2"). Imported here, before any run, the finder is
    # part of every snapshot those runs restore.
    import importlib_metadata  # noqa: F401
except ImportError:  # the lake and client environments of .ci/run have no LiteLLM
    pass


@pytest.fixture(scope="session")
def _fake_server() -> Iterator[FakeServer]:
    # one real HTTP server per session (per xdist worker); each test gets a fresh provider behind it
    server = FakeServer(FakeProvider())
    yield server
    server.close()


@pytest.fixture
def fake_provider() -> FakeProvider:
    """A fresh FakeProvider: empty script, no recorded requests, cold caches."""
    return FakeProvider()


@pytest.fixture
def fake_url(_fake_server: FakeServer, fake_provider: FakeProvider) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT``, no ``/v1``) of a real HTTP server answering with ``fake_provider``."""
    _fake_server.provider = fake_provider
    yield _fake_server.url
    _fake_server.provider = FakeProvider()


@pytest.fixture
def instrumented():
    """`workbench.instrument()` in effect for the test, left as found."""
    import workbench

    already = workbench.capture.instrumented()
    workbench.instrument()
    yield
    if not already:
        workbench.uninstrument()
