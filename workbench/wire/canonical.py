"""Content identity: RFC 8785 canonical JSON and the versioned request hash used by replay."""

from __future__ import annotations

import hashlib
import json
import math
from urllib.parse import urlsplit

import orjson
import rfc8785

HASH_VERSION = "wb1"
_SAFE_INT = 2**53 - 1  # RFC 8785 numbers are doubles: larger integers are refused


def canonical_json(value) -> bytes:
    """RFC 8785 (JCS) bytes: sorted keys, no spaces, canonical numbers.

    orjson with sorted keys writes the same bytes on most values, 5-10x faster than the reference
    implementation; the values where the two differ (integral or tiny floats, unsafe integers,
    non-ASCII keys, lone surrogates, deep nesting) go to the reference."""
    if _orjson_agrees(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONEncodeError, TypeError):
            pass
    return rfc8785.dumps(value)


def _orjson_agrees(value) -> bool:
    """Is `value` one orjson writes exactly as RFC 8785 does? Its floats must be finite, not
    integral (JavaScript writes `1`, orjson `1.0`) and at least 1e-5 in size (JavaScript switches to
    exponents only below 1e-6); integers within ±(2**53 - 1); keys ASCII (so that code point order,
    orjson's, is UTF-16 order, RFC 8785's)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str or not key.isascii():
                    return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is int:
            if not -_SAFE_INT <= item <= _SAFE_INT:
                return False
        elif kind is float:
            if not math.isfinite(item) or item.is_integer() or abs(item) < 1e-5:
                return False
        else:
            return False
    return True


def digest(value) -> str:
    """A versioned hash of any JSON value: `wb1:` + sha256 of its canonical JSON."""
    return f"{HASH_VERSION}:{hashlib.sha256(canonical_json(value)).hexdigest()}"


def canonical_body(body: bytes):
    """The JSON value of a request body, or its text when it is not JSON (hashed as a string)."""
    if not body:
        return None
    try:
        # the standard library's value, several times faster; but integers past 64 bits come back as
        # floats (RFC 8785 writes every number as a double anyway): recorded hashes were made this way
        return orjson.loads(body)
    except orjson.JSONDecodeError:  # what only the standard library reads: NaN, lone surrogates
        pass
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
