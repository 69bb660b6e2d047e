"""Content identity: RFC 8785 canonical JSON and the versioned request hash used by replay."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlsplit

import rfc8785

HASH_VERSION = "wb1"


def canonical_json(value) -> bytes:
    """RFC 8785 (JCS) bytes: sorted keys, no spaces, canonical numbers."""
    return rfc8785.dumps(value)


def digest(value) -> str:
    """A versioned hash of any JSON value: `wb1:` + sha256 of its canonical JSON."""
    return f"{HASH_VERSION}:{hashlib.sha256(canonical_json(value)).hexdigest()}"


def canonical_body(body: bytes):
    """The JSON value of a request body, or its text when it is not JSON (hashed as a string)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return body.decode("utf-8", "replace")


def request_hash(method: str, url: str, body: bytes) -> str:
    """Hash of method, path and canonical body; host, port, query and headers excluded so that a
    replay does not depend on the base URL."""
    try:
        value = canonical_body(body)
        return digest({"method": method.upper(), "path": urlsplit(url).path, "body": value})
    except (TypeError, ValueError, OverflowError):  # e.g. floats RFC 8785 refuses (NaN)
        raw = hashlib.sha256(method.upper().encode() + b" " + urlsplit(url).path.encode() + b"\n" + body)
        return f"{HASH_VERSION}:{raw.hexdigest()}"
