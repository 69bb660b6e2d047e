"""The request hash is replay's index key: canonical JSON must be RFC 8785's, byte for byte, on
every value (committed cassettes keep the hashes they were recorded with)."""

from __future__ import annotations

import json
import math

import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from workbench.wire.canonical import canonical_json, request_hash

# every code point, lone surrogates included (json.loads gives them for "\ud800")
any_text = st.text(st.characters(codec=None, categories=None), max_size=12)
numbers = (
    st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-1e-4, max_value=1e-4)  # where JavaScript turns to exponents
    | st.sampled_from([0.0, -0.0, 1.0, 1e16, 1e21, 1e-7, 9.999999999999999e-06, 2.0**53, 2**53 - 1, 2**53])
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | any_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=5),
    max_leaves=30,
)


def _reference(value) -> bytes | type:
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # noqa: BLE001 - what the reference refuses, ours must refuse alike
        return type(exc)


@settings(max_examples=2000, deadline=None)
@given(value=json_values)
@example({"\U0001f600": 1, "\ufb01": 2})  # UTF-16 order differs from code point order here
@example({"a": [1.5, 0.1, 1e-05, 3e-06, 1e300, 5e-324]})
@example("\ud800")
def test_canonical_json_is_rfc8785_byte_for_byte(value):
    expected = _reference(value)
    if isinstance(expected, bytes):
        assert canonical_json(value) == expected
    else:
        try:
            canonical_json(value)
        except Exception as exc:  # noqa: BLE001
            assert type(exc) is expected
        else:
            raise AssertionError(f"the reference refuses {value!r} ({expected.__name__}), ours did not")


def test_deep_nesting_beyond_orjson_is_still_canonical():
    value: list = [1]
    for _ in range(400):
        value = [value]
    assert canonical_json(value) == rfc8785.dumps(value)


def test_request_hash_is_the_documented_digest_and_ignores_host_key_order_and_spacing():
    body = {"model": "gpt-4o-mini", "temperature": 0.7, "messages": [{"role": "user", "content": "héllo"}]}
    reordered = json.dumps(dict(reversed(list(body.items()))), indent=2).encode()
    first = request_hash("POST", "http://127.0.0.1:1234/v1/chat/completions", json.dumps(body).encode())
    second = request_hash("post", "https://api.openai.com/v1/chat/completions?x=1", reordered)
    assert first == second
    import hashlib

    canonical = rfc8785.dumps({"method": "POST", "path": "/v1/chat/completions", "body": body})
    assert first == "wb1:" + hashlib.sha256(canonical).hexdigest()


def test_values_rfc8785_refuses_hash_the_raw_bytes():
    body = b'{"temperature": NaN}'
    assert math.isnan(json.loads(body)["temperature"])
    assert request_hash("POST", "/v1/chat/completions", body).startswith("wb1:")
    assert request_hash("POST", "/v1/chat/completions", body) != request_hash("POST", "/v1/chat/completions", b'{"temperature": null}')
