"""Cassettes: reading, writing, matching and replaying vcrpy cassettes."""
