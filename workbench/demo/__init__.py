"""Offline demo support: a deterministic, scriptable fake LLM provider (see ``fake_provider``)."""
