"""Workbench: record, replay, evaluate and audit LLM calls."""

__version__ = "0.1.0"
