"""Fixtures of the reliability suite (the helpers live in `faults.py`)."""

from reliability.faults import mount_namespace  # noqa: F401 - a fixture
